//! Predicated loops on the GPU (the CPU's [`crate::cpu::opt::loop_predicates`],
//! after C2's loop predication): an innermost loop whose array accesses
//! are affine in its induction variable has them checked once where it is
//! entered — every covered access in bounds for every value the variable
//! takes, null arrays failing the test (length 0) — and then runs a copy of
//! the loop in which those accesses are an address and a load or store; when
//! the test fails, the checked loop runs. The unchecked copy is unrolled
//! and has no landings (`crate::lower::predicated`, shared with the CPU): a
//! workitem resumed in the loop lands where the test is made.

use super::*;
use crate::cpu::opt::{Inv, PredicatedLoop};
use crate::lower::Backend;
use std::collections::BTreeMap;

impl PtxWalker<'_> {
    /// Lower the current frame's body, its predicated loops in two versions
    /// (the kernel's own loops; an inlined callee's are lowered once).
    pub(super) fn kernel_body(&mut self) -> Result<(), JitError> {
        let loops = std::mem::take(&mut self.backend.loops);
        let res = self.body_with_predicated_loops(
            &loops,
            |lp| lp.header,
            |w, lp, t| w.predicated_loop(lp, t),
        );
        self.backend.loops = loops;
        res
    }

    /// The entry of `lp` (the header's label, which every entering edge
    /// targets): the test, the unchecked copies when it holds, and a jump
    /// to the checked version — which the caller lowers from the header,
    /// left mapped to it (so its back-edges stay in it).
    fn predicated_loop(&mut self, lp: &PredicatedLoop, terminated: bool) -> Result<(), JitError> {
        let h = lp.header;
        let entry = self.cur.blocks[&h].clone();
        if !terminated {
            Ptx::jump(self, &entry);
        }
        Ptx::switch_to(self, &entry);
        let (ok, bases) = self.loop_predicate(lp);
        let (fast, checked) = (self.new_label(), self.new_label());
        self.emit(format!("@!{ok} bra {checked};"));
        let added: Vec<Bci> = lp
            .accesses
            .iter()
            .filter_map(|(b, arr, _)| {
                let base = bases[arr].clone();
                self.backend
                    .loop_unchecked
                    .insert(*b, base)
                    .is_none()
                    .then_some(*b)
            })
            .collect();
        let hoisted = self.hoist_loads(lp, &bases);
        self.stride_accesses(lp, &bases);
        let copies = crate::cpu::opt::loop_unroll(lp);
        // A round of the copies runs when `k + (copies - 1) * step < bound`
        // (then every copy's header test passes: `k` grows by at most `step`
        // an iteration); else the checked version runs the last iterations.
        // The limit is made once here, clamped to `i32` (a limit below
        // `i32::MIN` lets no round run).
        let lim = (copies > 1).then(|| {
            let n = self.eval_inv(&lp.bound);
            let (wide, lim) = (self.t(Cls::B64), self.t(Cls::B32));
            self.emit(format!("cvt.s64.s32 {wide}, {n};"));
            self.emit(format!(
                "add.s64 {wide}, {wide}, {};",
                -(i64::from(copies) - 1) * lp.step
            ));
            self.emit(format!("max.s64 {wide}, {wide}, {};", i32::MIN));
            self.emit(format!("cvt.u32.u64 {lim}, {wide};"));
            lim
        });
        let k = self.cur.locals[lp.iv as usize].clone();
        let mut test_round = |w: &mut Self| {
            let (p, lim) = (w.t(Cls::Pred), lim.clone().expect("copies > 1"));
            w.emit(format!("setp.ge.s32 {p}, {k}, {lim};"));
            w.emit(format!("@{p} bra {checked};"));
        };
        let round = lim
            .is_some()
            .then_some((lp.test, &mut test_round as &mut dyn FnMut(&mut Self)));
        let res = self.unchecked_loop_copies((lp.header, lp.last), copies, fast, round);
        for b in added {
            self.backend.loop_unchecked.remove(&b);
        }
        for a in hoisted {
            self.backend.loop_hoisted.remove(&a);
        }
        self.backend.loop_strided.clear();
        res?;
        self.cur.blocks.insert(h, checked);
        Ok(())
    }

    /// Whether every access `lp` covers is in bounds for every value its
    /// induction variable takes, as a predicate (the two ends suffice:
    /// [`opt::loop_predicates`]); true as well when the loop does not run.
    /// With it, each covered array's element 0 by local (the loop never
    /// assigns them: the registers hold for the whole loop).
    fn loop_predicate(&mut self, lp: &PredicatedLoop) -> (String, BTreeMap<u32, String>) {
        let mut bases = BTreeMap::new();
        let wide = |w: &mut Self, x: String| {
            let r = w.t(Cls::B64);
            w.emit(format!("cvt.s64.s32 {r}, {x};"));
            r
        };
        let k = self.cur.locals[lp.iv as usize].clone();
        let k0 = wide(self, k);
        let n = self.eval_inv(&lp.bound);
        let n = wide(self, n);
        let (kmax, top, ok) = (self.t(Cls::B64), self.t(Cls::B64), self.t(Cls::Pred));
        self.emit(format!("add.s64 {kmax}, {n}, -1;"));
        // k never wraps: bound - 1 + step <= i32::MAX.
        self.emit(format!("add.s64 {top}, {kmax}, {};", lp.step));
        self.emit(format!("setp.le.s64 {ok}, {top}, {};", i32::MAX));
        for (bci, arr, form) in &lp.accesses {
            let coef = self.eval_inv(&form.coef);
            let coef = wide(self, coef);
            if !matches!(fold(&form.coef), Inv::Const(_)) {
                // The strided copy's step, `size * coef` bytes, fits an
                // `i32` (`stride_accesses`).
                let size =
                    i64::from(crate::lower::elem(self.v.func(self.cur.func).body[*bci as usize]).1);
                let step = self.t(Cls::B64);
                self.emit(format!("mul.lo.s64 {step}, {coef}, {size};"));
                self.emit(format!("setp.le.and.s64 {ok}, {step}, {}, {ok};", i32::MAX));
                self.emit(format!("setp.ge.and.s64 {ok}, {step}, {}, {ok};", i32::MIN));
            }
            let off = self.eval_inv(&form.off);
            let off = wide(self, off);
            let (at0, at1, lo, hi) = (
                self.t(Cls::B64),
                self.t(Cls::B64),
                self.t(Cls::B64),
                self.t(Cls::B64),
            );
            self.emit(format!("mad.lo.s64 {at0}, {coef}, {k0}, {off};"));
            self.emit(format!("mad.lo.s64 {at1}, {coef}, {kmax}, {off};"));
            self.emit(format!("min.s64 {lo}, {at0}, {at1};"));
            self.emit(format!("max.s64 {hi}, {at0}, {at1};"));
            // A null array reads length 0 (heap word 0 is reserved and
            // readable), which no index passes.
            let base = match bases.get(arr) {
                Some(b) => b,
                None => {
                    let r = self.cur.locals[*arr as usize].clone();
                    let b = self.obj_addr(&r);
                    bases.entry(*arr).or_insert(b)
                }
            }
            .clone();
            let len = Ptx::array_len(self, base);
            let len64 = self.t(Cls::B64);
            self.emit(format!("cvt.u64.u32 {len64}, {len};"));
            self.emit(format!("setp.ge.and.s64 {ok}, {lo}, 0, {ok};"));
            self.emit(format!("setp.lt.and.s64 {ok}, {hi}, {len64}, {ok};"));
        }
        let idle = self.t(Cls::Pred);
        self.emit(format!("setp.ge.s64 {idle}, {k0}, {n};"));
        self.emit(format!("or.pred {ok}, {ok}, {idle};"));
        for b in bases.values_mut() {
            let e = self.t(Cls::B64);
            self.emit(format!("add.u64 {e}, {b}, 8;"));
            *b = e;
        }
        (ok, bases)
    }

    /// A loop-invariant expression's value (`b32`), as the bytecode
    /// computes it (wrapping).
    fn eval_inv(&mut self, e: &Inv) -> String {
        let e = &fold(e);
        match e {
            Inv::Const(c) => {
                let r = self.t(Cls::B32);
                self.emit(format!("mov.b32 {r}, {c};"));
                r
            }
            Inv::Local(l) => self.cur.locals[*l as usize].clone(),
            Inv::Add(x, y) | Inv::Sub(x, y) | Inv::Mul(x, y) => {
                let (a, b) = (self.eval_inv(x), self.eval_inv(y));
                let op = match e {
                    Inv::Add(..) => "add.s32",
                    Inv::Sub(..) => "sub.s32",
                    _ => "mul.lo.s32",
                };
                let r = self.t(Cls::B32);
                self.emit(format!("{op} {r}, {a}, {b};"));
                r
            }
        }
    }

    /// The loads of `lp` at indices the loop does not change (`a[b]` in
    /// `for j ..`), made once where the unchecked copy is entered (its test
    /// passed: they are in bounds) when the loop writes nothing to the heap
    /// (no store, atomic, allocation or call): each covered access's
    /// address maps to its loaded value (`loop_hoisted`), which the copy's
    /// load reads instead. A write by another workitem, or by host code at
    /// a safepoint while the loop runs, races with the loop's reads, which
    /// may then not see it (as a Java compiler may hoist such a load).
    /// Returns the addresses mapped.
    fn hoist_loads(&mut self, lp: &PredicatedLoop, bases: &BTreeMap<u32, String>) -> Vec<String> {
        use offload_ir::Inst;
        let body = &self.v.func(self.cur.func).body;
        let writes = body[lp.header as usize..=lp.last as usize].iter().any(|i| {
            matches!(
                i,
                Inst::I32AStore
                    | Inst::I64AStore
                    | Inst::F32AStore
                    | Inst::F64AStore
                    | Inst::RefAStore
                    | Inst::PutField { .. }
                    | Inst::I32ArrayAtomicAdd
                    | Inst::I32ArrayCmpxchg
                    | Inst::I64ArrayAtomicAdd
                    | Inst::I64ArrayCmpxchg
                    | Inst::FieldAtomicAdd { .. }
                    | Inst::FieldCmpxchg { .. }
                    | Inst::New { .. }
                    | Inst::NewArray { .. }
                    | Inst::Call { .. }
                    | Inst::CallVirt { .. }
            )
        });
        if writes {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (bci, arr, form) in &lp.accesses {
            let inst = body[*bci as usize];
            let load = matches!(
                inst,
                Inst::I32ALoad | Inst::I64ALoad | Inst::F32ALoad | Inst::F64ALoad | Inst::RefALoad
            );
            if !load || fold(&form.coef) != Inv::Const(0) {
                continue;
            }
            let (k, size) = crate::lower::elem(inst);
            let idx = self.eval_inv(&form.off);
            let a = self.t(Cls::B64);
            self.emit(format!("mul.wide.u32 {a}, {idx}, {size};"));
            self.emit(format!("add.u64 {a}, {a}, {};", bases[arr]));
            let x = Ptx::load(self, k, a.clone(), 0);
            self.backend.loop_unchecked.insert(*bci, a.clone());
            self.backend.loop_hoisted.insert(a.clone(), x);
            out.push(a);
        }
        out
    }

    /// For each covered access not hoisted, its address as a progression
    /// in the induction variable `k`, made where the unchecked copy is
    /// entered: `start` (the address at `k = 0`: element 0 plus `size *
    /// off`) and `step` (`size * coef` bytes per unit of `k`, which the
    /// loop's test checked fits an `i32`), exact 64-bit arithmetic on the
    /// `coef` and `off` the bytecode computes — the index
    /// the test proved in bounds, so the address is the one the bytecode's
    /// index gives. The copy's accesses are then one `mad` of `k`, and the
    /// bytecode's index arithmetic dies (`loop_strided`).
    fn stride_accesses(&mut self, lp: &PredicatedLoop, bases: &BTreeMap<u32, String>) {
        let body = &self.v.func(self.cur.func).body;
        let k = self.cur.locals[lp.iv as usize].clone();
        for (bci, arr, form) in &lp.accesses {
            let addr = &self.backend.loop_unchecked[bci];
            if self.backend.loop_hoisted.contains_key(addr) {
                continue;
            }
            let size = i64::from(crate::lower::elem(body[*bci as usize]).1);
            let off = self.eval_inv(&form.off);
            let (off64, start) = (self.t(Cls::B64), self.t(Cls::B64));
            self.emit(format!("cvt.s64.s32 {off64}, {off};"));
            self.emit(format!(
                "mad.lo.s64 {start}, {off64}, {size}, {};",
                bases[arr]
            ));
            let step = match fold(&form.coef) {
                Inv::Const(c) => Step::Bytes(i64::from(c) * size),
                e => {
                    // Fits an `i32`: the test checked it.
                    let c = self.eval_inv(&e);
                    let st = self.t(Cls::B32);
                    self.emit(format!("mul.lo.s32 {st}, {c}, {size};"));
                    Step::Reg(st)
                }
            };
            self.backend
                .loop_strided
                .insert(*bci, (k.clone(), start, step));
        }
    }

    /// The address of element `idx` (of `size` bytes) at an access `bci`
    /// the current unchecked loop copy covers (its test passed: the array
    /// is not null and `idx` in bounds), or `None` elsewhere.
    pub(super) fn loop_elem_addr(&mut self, idx: &str, size: u32, bci: Bci) -> Option<String> {
        if !self.outer.is_empty() {
            return None;
        }
        let base = self.backend.loop_unchecked.get(&bci)?.clone();
        if self.backend.loop_hoisted.contains_key(&base) {
            // A hoisted load's address (`hoist_loads`).
            return Some(base);
        }
        if let Some((k, start, step)) = self.backend.loop_strided.get(&bci).cloned() {
            // A progression in `k` (`stride_accesses`).
            let a = self.t(Cls::B64);
            match step {
                Step::Bytes(b) if i32::try_from(b).is_ok() => {
                    self.emit(format!("mad.wide.s32 {a}, {k}, {b}, {start};"));
                }
                Step::Reg(r) => {
                    self.emit(format!("mad.wide.s32 {a}, {k}, {r}, {start};"));
                }
                Step::Bytes(b) => {
                    let k64 = self.t(Cls::B64);
                    self.emit(format!("cvt.s64.s32 {k64}, {k};"));
                    self.emit(format!("mad.lo.s64 {a}, {k64}, {b}, {start};"));
                }
            }
            return Some(a);
        }
        let a = self.t(Cls::B64);
        self.emit(format!("mul.wide.u32 {a}, {idx}, {size};"));
        self.emit(format!("add.u64 {a}, {a}, {base};"));
        Some(a)
    }
}

/// How far a strided access's address moves per unit of the induction
/// variable (`stride_accesses`).
#[derive(Clone, Debug)]
pub(super) enum Step {
    /// A constant number of bytes.
    Bytes(i64),
    /// A register holding it (`b32`: the loop's test checked it fits).
    Reg(String),
}

/// `e` with the identities of wrapping arithmetic applied (`x + 0`,
/// `x - 0`, `1 * x`, `0 * x`, constants combined): the forms
/// [`opt::loop_predicates`] builds are full of them (`1 * k + 0`).
fn fold(e: &Inv) -> Inv {
    let b = |x: Inv| Box::new(x);
    match e {
        Inv::Const(_) | Inv::Local(_) => e.clone(),
        Inv::Add(x, y) | Inv::Sub(x, y) | Inv::Mul(x, y) => {
            let (x, y) = (fold(x), fold(y));
            match (e, x, y) {
                (Inv::Add(..), Inv::Const(a), Inv::Const(c)) => Inv::Const(a.wrapping_add(c)),
                (Inv::Sub(..), Inv::Const(a), Inv::Const(c)) => Inv::Const(a.wrapping_sub(c)),
                (Inv::Mul(..), Inv::Const(a), Inv::Const(c)) => Inv::Const(a.wrapping_mul(c)),
                (Inv::Add(..), Inv::Const(0), z)
                | (Inv::Add(..) | Inv::Sub(..), z, Inv::Const(0))
                | (Inv::Mul(..), Inv::Const(1), z)
                | (Inv::Mul(..), z, Inv::Const(1)) => z,
                (Inv::Mul(..), Inv::Const(0), _) | (Inv::Mul(..), _, Inv::Const(0)) => {
                    Inv::Const(0)
                }
                (Inv::Add(..), x, y) => Inv::Add(b(x), b(y)),
                (Inv::Sub(..), x, y) => Inv::Sub(b(x), b(y)),
                (_, x, y) => Inv::Mul(b(x), b(y)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Inv, fold};

    #[test]
    fn identities_fold_and_the_rest_stays() {
        let l = |x| Box::new(Inv::Local(x));
        let c = |x| Box::new(Inv::Const(x));
        // 1 * k-coefficient and 0 * n + col from matmul's forms.
        assert_eq!(fold(&Inv::Mul(c(1), l(1))), Inv::Local(1));
        assert_eq!(
            fold(&Inv::Add(Box::new(Inv::Mul(c(0), l(1))), l(6))),
            Inv::Local(6)
        );
        assert_eq!(fold(&Inv::Sub(l(2), c(0))), Inv::Local(2));
        assert_eq!(fold(&Inv::Add(c(i32::MAX), c(1))), Inv::Const(i32::MIN));
        // 0 - x is not x.
        let neg = Inv::Sub(c(0), l(3));
        assert_eq!(fold(&neg), neg);
        let prod = Inv::Mul(l(5), l(1));
        assert_eq!(fold(&prod), prod);
    }
}
