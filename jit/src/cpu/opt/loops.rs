//! Loop predication ([`loop_predicates`]).

use super::{UNROLL, kept_below, shared_step};
use offload_ir::analysis::FuncAnalysis;
use offload_ir::{Bci, FuncId};

/// A loop-invariant `i32` expression over constants and locals the loop
/// never assigns, evaluated with the bytecode's wrapping arithmetic where
/// the loop is entered ([`loop_predicates`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Inv {
    Const(i32),
    Local(u32),
    Add(Box<Inv>, Box<Inv>),
    Sub(Box<Inv>, Box<Inv>),
    Mul(Box<Inv>, Box<Inv>),
}

impl Inv {
    fn size(&self) -> usize {
        match self {
            Inv::Const(_) | Inv::Local(_) => 1,
            Inv::Add(a, b) | Inv::Sub(a, b) | Inv::Mul(a, b) => 1 + a.size() + b.size(),
        }
    }
}

/// An index `coef * k + off` (mod 2^32) in a loop's induction variable `k`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Affine {
    pub(crate) coef: Inv,
    pub(crate) off: Inv,
}

/// An innermost loop whose array accesses can be checked once, where the
/// loop is entered, instead of in every iteration ([`loop_predicates`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PredicatedLoop {
    /// The loop header (the target of every back-edge) and the last
    /// instruction of the loop (the last back-edge).
    pub(crate) header: Bci,
    pub(crate) last: Bci,
    /// The induction variable `k` (an `i32` local): the header leaves the
    /// loop unless `k < bound`, and the loop changes `k` only by `inc k c`
    /// with `c > 0`, by at most `step` in all per iteration.
    pub(crate) iv: u32,
    pub(crate) bound: Inv,
    pub(crate) step: i64,
    /// The header's test: the branch that leaves the loop unless
    /// `k < bound`.
    pub(crate) test: Bci,
    /// The accesses covered: bytecode index, the array's local (a reference
    /// the loop never assigns), and the index in `k`.
    pub(crate) accesses: Vec<(Bci, u32, Affine)>,
}

/// What [`loop_predicates`] knows of a value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum LSym {
    Other,
    /// A local the loop assigns, as loaded.
    Var(u32),
    Inv(Inv),
    Aff(Affine),
    /// A reference local the loop never assigns.
    Arr(u32),
    /// An `i32` comparison of two values.
    Cmp(offload_ir::Inst, Box<LSym>, Box<LSym>),
}

/// Expressions larger than this are not tracked.
const MAX_INV_SIZE: usize = 32;

fn inv(e: Inv) -> LSym {
    if e.size() > MAX_INV_SIZE {
        LSym::Other
    } else {
        LSym::Inv(e)
    }
}

fn aff(coef: Inv, off: Inv) -> LSym {
    if coef.size() + off.size() > MAX_INV_SIZE {
        LSym::Other
    } else {
        LSym::Aff(Affine { coef, off })
    }
}

/// `a op b` for `i32.add` (`op` = 0), `i32.sub` (1) and `i32.mul` (2), in
/// the ring of integers mod 2^32 the bytecode computes in.
fn arith(op: u8, a: LSym, b: LSym, iv: u32) -> LSym {
    let b2 = |x: Inv, y: Inv| match op {
        0 => Inv::Add(Box::new(x), Box::new(y)),
        1 => Inv::Sub(Box::new(x), Box::new(y)),
        _ => Inv::Mul(Box::new(x), Box::new(y)),
    };
    let as_aff = |s: LSym| match s {
        LSym::Var(l) if l == iv => Some(Affine {
            coef: Inv::Const(1),
            off: Inv::Const(0),
        }),
        LSym::Aff(a) => Some(a),
        _ => None,
    };
    match (a, b) {
        (LSym::Inv(x), LSym::Inv(y)) => inv(b2(x, y)),
        (x, y) => match (as_aff(x.clone()), as_aff(y.clone()), x, y) {
            (Some(p), Some(q), _, _) if op < 2 => aff(b2(p.coef, q.coef), b2(p.off, q.off)),
            (Some(p), None, _, LSym::Inv(y)) => match op {
                0 | 1 => aff(p.coef, b2(p.off, y)),
                _ => aff(b2(p.coef, y.clone()), b2(p.off, y)),
            },
            (None, Some(q), LSym::Inv(x), _) => match op {
                0 => aff(q.coef, b2(x, q.off)),
                1 => aff(
                    Inv::Sub(Box::new(Inv::Const(0)), Box::new(q.coef)),
                    b2(x, q.off),
                ),
                _ => aff(b2(x.clone(), q.coef), b2(x, q.off)),
            },
            _ => LSym::Other,
        },
    }
}

/// The innermost loops of kernel `k` whose array accesses a backend may
/// check once where the loop is entered (C2's loop predication, with a
/// checked version of the loop for when the check fails).
///
/// A loop qualifies when it is a single-entry region `[header, last]`
/// (every branch into it from outside targets the header from before it;
/// every branch inside that goes backwards targets the header), its header
/// block is `k < bound` in one of the forms `load k, <bound>, i32.ge,
/// br_if out` / `i32.lt, br_unless out` (or with the operands swapped and
/// `i32.le`/`i32.gt`), where `bound` is loop-invariant, and the loop
/// changes the `i32` local `k` only by `inc k c` with `c > 0`.
///
/// An access is covered when its array is a reference local the loop never
/// assigns and its index is `coef * k + off` for loop-invariant `coef` and
/// `off`, computed before any `inc k` of the iteration (every path from the
/// header to it goes forward, so an `inc` at a later bytecode index has not
/// run). In every iteration such an access sees `k0 <= k <= bound - 1`,
/// where `k0` is `k` at entry — provided `k` cannot wrap past `i32::MAX`,
/// i.e. `bound - 1 + step <= i32::MAX`. The index the bytecode computes is
/// congruent mod 2^32 to the exact `coef * k + off` (with `coef` and `off`
/// as the bytecode computes them); so if the exact value is in `[0, len)` at
/// `k0` and at `bound - 1`, it is so for every `k` between (it is affine),
/// and as it lies in `[0, 2^31)` the wrapped index equals it. That is the
/// predicate a backend evaluates at entry (true as well when the loop does
/// not run, `k0 >= bound`).
pub(crate) fn loop_predicates(
    v: &offload_ir::Verified,
    k: FuncId,
    a: &FuncAnalysis,
) -> Vec<PredicatedLoop> {
    use offload_ir::{Inst, Kind};
    let f = v.func(k);
    let frames = &v.types(k).frames;
    let leaders: std::collections::HashSet<Bci> = a.cfg.blocks.iter().map(|b| b.start).collect();
    let mut back: std::collections::BTreeMap<Bci, Bci> = std::collections::BTreeMap::new();
    for (s, inst) in f.body.iter().enumerate() {
        if let Some(t) = inst.target()
            && t as usize <= s
            && frames[s].is_some()
        {
            let e = back.entry(t).or_insert(s as Bci);
            *e = (*e).max(s as Bci);
        }
    }
    let mut out = Vec::new();
    'loops: for (&h, &b) in &back {
        let (hu, bu) = (h as usize, b as usize);
        if frames[hu].as_ref().is_none_or(|fr| !fr.stack.is_empty()) {
            continue;
        }
        for (s, inst) in f.body.iter().enumerate() {
            let Some(t) = inst.target() else { continue };
            let inside = (hu..=bu).contains(&s);
            let single_entry = if inside {
                t as usize > s || t == h
            } else {
                // Not into the middle, nor to the header from after it.
                !((h + 1..=b).contains(&t) || (t == h && s > bu))
            };
            if !single_entry {
                continue 'loops;
            }
        }
        let mut assigned = vec![false; f.locals.len()];
        for inst in &f.body[hu..=bu] {
            if let Inst::Store { local } | Inst::Inc { local, .. } = *inst {
                assigned[local.index()] = true;
            }
        }
        // A forward symbolic walk of the loop; `iv` is known once the
        // header's test is.
        let mut iv: Option<u32> = None;
        let mut bound = None;
        let mut test: Bci = 0;
        let mut stack: Vec<LSym> = Vec::new();
        let mut accesses = Vec::new();
        for bci in hu..=bu {
            let inst = f.body[bci];
            let Some(frame) = frames[bci].as_ref() else {
                continue;
            };
            let depth = frame.stack.len();
            if (bci != hu && leaders.contains(&(bci as Bci))) || stack.len() != depth {
                if iv.is_none() {
                    continue 'loops; // the header block ended without its test
                }
                stack.clear();
                stack.resize(depth, LSym::Other);
            }
            let ivl = iv.unwrap_or(u32::MAX);
            let pop = |s: &mut Vec<LSym>| s.pop().unwrap_or(LSym::Other);
            let mut access = |s: &mut Vec<LSym>| {
                let idx = pop(s);
                let arr = pop(s);
                let form = match idx {
                    LSym::Var(l) if l == ivl => Some(Affine {
                        coef: Inv::Const(1),
                        off: Inv::Const(0),
                    }),
                    LSym::Aff(a) => Some(a),
                    LSym::Inv(e) => Some(Affine {
                        coef: Inv::Const(0),
                        off: e,
                    }),
                    _ => None,
                };
                if let (Some(form), LSym::Arr(l)) = (form, arr) {
                    accesses.push((bci as Bci, l, form));
                }
            };
            match inst {
                Inst::Load { local } => {
                    let l = local.index();
                    stack.push(match f.locals[l].ty.kind() {
                        _ if assigned[l] => LSym::Var(l as u32),
                        Kind::I32 => LSym::Inv(Inv::Local(l as u32)),
                        Kind::Ref => LSym::Arr(l as u32),
                        _ => LSym::Other,
                    });
                }
                Inst::I32Const { value } => stack.push(LSym::Inv(Inv::Const(value))),
                Inst::I32Add | Inst::I32Sub | Inst::I32Mul => {
                    let y = pop(&mut stack);
                    let x = pop(&mut stack);
                    let op = match inst {
                        Inst::I32Add => 0,
                        Inst::I32Sub => 1,
                        _ => 2,
                    };
                    stack.push(arith(op, x, y, ivl));
                }
                Inst::I32Lt | Inst::I32Le | Inst::I32Gt | Inst::I32Ge if iv.is_none() => {
                    let y = pop(&mut stack);
                    let x = pop(&mut stack);
                    stack.push(LSym::Cmp(inst, Box::new(x), Box::new(y)));
                }
                Inst::BrIf { target } | Inst::BrUnless { target } if iv.is_none() => {
                    // The header's test: staying in the loop must mean k < n.
                    let exit_if = matches!(inst, Inst::BrIf { .. });
                    let found = match (pop(&mut stack), exit_if) {
                        (LSym::Cmp(c, x, y), _) if target.0 > b && stack.is_empty() => {
                            match (c, *x, *y, exit_if) {
                                (Inst::I32Ge, LSym::Var(l), LSym::Inv(n), true)
                                | (Inst::I32Lt, LSym::Var(l), LSym::Inv(n), false)
                                | (Inst::I32Le, LSym::Inv(n), LSym::Var(l), true)
                                | (Inst::I32Gt, LSym::Inv(n), LSym::Var(l), false) => Some((l, n)),
                                _ => None,
                            }
                        }
                        _ => None,
                    };
                    let Some((l, n)) = found else {
                        continue 'loops;
                    };
                    if f.locals[l as usize].ty.kind() != Kind::I32 {
                        continue 'loops;
                    }
                    iv = Some(l);
                    bound = Some(n);
                    test = bci as Bci;
                }
                _ if iv.is_none() => continue 'loops, // anything else in the header
                _ if shared_step(&mut stack, inst, LSym::Other, &mut access) => {}
                _ => {
                    let after = frames
                        .get(bci + 1)
                        .and_then(|fr| fr.as_ref())
                        .map_or(0, |fr| fr.stack.len());
                    stack.truncate(kept_below(inst, depth, after));
                    stack.resize(after, LSym::Other);
                }
            }
        }
        let (Some(iv), Some(bound)) = (iv, bound) else {
            continue;
        };
        // The induction variable moves only by positive increments; an
        // access is covered only before every one of them.
        let mut step = 0i64;
        let mut first_inc = usize::MAX;
        for (bci, inst) in f.body.iter().enumerate().take(bu + 1).skip(hu) {
            match *inst {
                Inst::Inc { local, delta } if local.index() == iv as usize => {
                    if delta <= 0 {
                        continue 'loops;
                    }
                    step += i64::from(delta);
                    first_inc = first_inc.min(bci);
                }
                Inst::Store { local } if local.index() == iv as usize => continue 'loops,
                _ => {}
            }
        }
        accesses.retain(|&(bci, _, _)| (bci as usize) < first_inc);
        if !accesses.is_empty() {
            out.push(PredicatedLoop {
                header: h,
                last: b,
                iv,
                bound,
                step,
                test,
                accesses,
            });
        }
    }
    out
}

/// The longest loop (in bytecode instructions) [`loop_unroll`] unrolls.
pub(crate) const LOOP_UNROLL_MAX_INSTS: u32 = 96;

/// How many copies of predicated loop `lp`'s unchecked version a backend
/// lowers, polling for safepoints on the back-edges of the last copy only:
/// [`UNROLL`] for a loop of at most [`LOOP_UNROLL_MAX_INSTS`] instructions,
/// else 1. Each copy keeps the header's test, so the loop still leaves
/// after any iteration; only the poll is paid once per `UNROLL` iterations
/// (a safepoint request waits for at most that many more iterations).
pub(crate) fn loop_unroll(lp: &PredicatedLoop) -> u32 {
    if lp.last - lp.header < LOOP_UNROLL_MAX_INSTS {
        UNROLL
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu::opt::test_support::example;
    use offload_ir::{parse_module, verify};

    /// `loop_predicates` of the first function of `src`.
    fn loops(src: &str) -> Vec<super::PredicatedLoop> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = offload_ir::FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        super::loop_predicates(&v, k, &a)
    }

    #[test]
    fn matmul_and_nbody_inner_loops_are_predicated() {
        use super::{Affine, Inv};
        let l = |x: u32| Box::new(Inv::Local(x));
        let c = |x: i32| Box::new(Inv::Const(x));
        // matmul: a[row * n + k], b[k * n + col]; row = 5, col = 6, k = 7, n = 1.
        let mm = loops(&example("matmul.obc"));
        assert_eq!(mm.len(), 1);
        let lp = &mm[0];
        assert_eq!((lp.iv, lp.step, &lp.bound), (7, 1, &Inv::Local(1)));
        let forms: Vec<(u32, Affine)> = lp.accesses.iter().map(|a| (a.1, a.2.clone())).collect();
        assert_eq!(
            forms,
            vec![
                (
                    2,
                    Affine {
                        coef: Inv::Const(1),
                        off: Inv::Add(Box::new(Inv::Mul(l(5), l(1))), c(0)),
                    }
                ),
                (
                    3,
                    Affine {
                        coef: Inv::Mul(c(1), l(1)),
                        off: Inv::Add(Box::new(Inv::Mul(c(0), l(1))), l(6)),
                    }
                ),
            ]
        );
        // nbody: px[j], px[b], py[j], py[b], pz[j], pz[b], m[j].
        let nb = loops(&example("nbody.obc"));
        assert_eq!(nb.len(), 1);
        assert_eq!(nb[0].accesses.len(), 7, "{:?}", nb[0].accesses);
    }

    #[test]
    fn loops_that_do_not_qualify_are_not_predicated() {
        let k = |body: &str| {
            loops(&format!(
                "kernel k(i: i64, n: i32, a: i32[], b: i32[]) {{\n local j: i32\n local t: i32\n i32.const 0\n store j\n{body}\n done:\n ret\n}}"
            ))
        };
        let accesses = |body: &str| -> Vec<u32> {
            k(body)
                .iter()
                .flat_map(|l| l.accesses.iter().map(|a| a.0))
                .collect()
        };
        // The plain shape, in both header forms and with swapped operands.
        let plain = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert_eq!(accesses(plain), vec![8]);
        let lt = " top:\n load j\n load n\n i32.lt\n br_unless done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert_eq!(accesses(lt), vec![8]);
        let swapped = " top:\n load n\n load j\n i32.le\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert_eq!(accesses(swapped), vec![8]);
        // `j <= n` lets j reach n: not k < bound.
        let le = " top:\n load j\n load n\n i32.gt\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert!(k(le).is_empty());
        // An access after the increment, a decrement, a store to j, a bound
        // or an array the loop assigns.
        let after = " top:\n load j\n load n\n i32.ge\n br_if done\n inc j 1\n load a\n load j\n i32.aload\n pop\n br top";
        assert!(k(after).is_empty());
        let down = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j -1\n br top";
        assert!(k(down).is_empty());
        let stored = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n load j\n i32.const 1\n i32.add\n store j\n br top";
        assert!(k(stored).is_empty());
        let bound = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n store n\n inc j 1\n br top";
        assert!(k(bound).is_empty());
        let array = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n load b\n store a\n inc j 1\n br top";
        assert!(accesses(array).is_empty());
        // An index through a local the loop assigns is not followed.
        let via = " top:\n load j\n load n\n i32.ge\n br_if done\n load j\n store t\n load a\n load t\n i32.aload\n pop\n inc j 1\n br top";
        assert!(accesses(via).is_empty());
        // An outer loop is not innermost; its inner loop is.
        let nested = " outer:\n load j\n load n\n i32.ge\n br_if done\n i32.const 0\n store t\n inner:\n load t\n load n\n i32.ge\n br_if next\n load a\n load t\n i32.aload\n pop\n inc t 1\n br inner\n next:\n load a\n load j\n i32.aload\n pop\n inc j 1\n br outer";
        let n = k(nested);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].iv, 5);
        // A second entry into the loop's middle.
        let entered = " load n\n br_if mid\n top:\n load j\n load n\n i32.ge\n br_if done\n mid:\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert!(k(entered).is_empty());
    }
}
