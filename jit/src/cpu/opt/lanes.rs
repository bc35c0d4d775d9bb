//! The one walk over a straight-line SIMD body: a lane per workitem, every
//! lane running the kernel's body in lockstep ([`super::vectorizable`]).
//!
//! Three things read such a body off the bytecode — the check that a
//! kernel has one ([`super::vectorizable`]), the 128-bit Cranelift bodies
//! (`cpu/loops.rs`) and the 256-bit encoded loop (`cpu/wide.rs`) — and all
//! three walk it here: the operand stack, the locals, which values are the
//! same for every lane, and which instructions and operand shapes a body
//! may have. Each supplies a [`LaneEmit`], which makes the values (or, for
//! the check, nothing).

use super::vector::simd_op;
use offload_ir::isa::BinOp;
use offload_ir::{Bci, Function, Inst, Kind};
use std::collections::BTreeSet;

/// A value of a SIMD body, as the walk tracks it; `V` is what an emitter
/// makes of a value, `A` of an array.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Lane<V, A> {
    /// The same for every lane, of this kind.
    Uniform(V, Kind),
    /// One per lane, of this kind (`i32` or `f32`).
    Varying(V, Kind),
    /// The workitem number, as the kernel's `i64` parameter.
    Idx,
    /// The workitem number narrowed to `i32`: the index of the lane's own
    /// elements.
    Idx32,
    /// An array parameter.
    Arr(A),
}

impl<V, A> Lane<V, A> {
    /// The kind of a uniform or per-lane value.
    fn kind(&self) -> Option<Kind> {
        match self {
            Lane::Uniform(_, k) | Lane::Varying(_, k) => Some(*k),
            _ => None,
        }
    }
}

/// What a walk's user makes of a SIMD body's values. Every method may
/// refuse (`None`), which ends the walk at that instruction.
pub(crate) trait LaneEmit {
    /// A value.
    type V: Copy;
    /// An array.
    type A: Copy;
    /// The kernel's scalar parameter `local` (1 ≤ `local` < its parameter
    /// count), of kind `k`.
    fn param(&mut self, local: usize, k: Kind) -> Option<Self::V>;
    /// The kernel's array parameter `local`.
    fn array(&mut self, local: usize) -> Option<Self::A>;
    /// A local's value before its first store, of kind `k` (the verifier
    /// sees to it that none is read).
    fn zero(&mut self, k: Kind) -> Option<Self::V>;
    /// A constant of kind `k` (`i32` or `f32`) with these bits.
    fn constant(&mut self, k: Kind, bits: u32) -> Option<Self::V>;
    /// Before each instruction: the values on the stack and in the locals.
    fn before(&mut self, _stack: &[Lane<Self::V, Self::A>], _locals: &[Lane<Self::V, Self::A>]) {}
    /// Lane-wise `a op b` of kind `k` (both operands are of that kind): a
    /// value per lane, or a uniform one when both are uniform and the
    /// emitter computes it once.
    fn binary(
        &mut self,
        k: Kind,
        op: BinOp,
        a: Lane<Self::V, Self::A>,
        b: Lane<Self::V, Self::A>,
    ) -> Option<Lane<Self::V, Self::A>>;
    /// Each lane's own element of `arr`, of kind `k`.
    fn load(&mut self, k: Kind, arr: Self::A) -> Option<Self::V>;
    /// Store `x` (of kind `k`) to each lane's own element of `arr`.
    fn store(&mut self, k: Kind, arr: Self::A, x: Lane<Self::V, Self::A>) -> Option<()>;
}

/// Walk `f`'s body as a SIMD body, calling `e` for its values; the first
/// instruction it cannot take is the error. With `unchecked`, every array
/// access must be one of them (indexed by the workitem number, proven in
/// bounds for the chunk); without, the caller has checked the body
/// already.
///
/// A body is one basic block ending in `ret`, its values are `i32` or
/// `f32` (and the workitem number and the arrays), its arithmetic is
/// [`simd_op`]'s, and each array access reads or writes the lane's own
/// element of an array parameter. A compare of `known`
/// ([`super::workitem_tests`]: an `i64` index's test that it survives its
/// narrowing) followed by a branch on it is one way only, so the body
/// may hold such tests and the throws behind them: the walk goes where the
/// branch goes.
pub(crate) fn walk<E: LaneEmit>(
    f: &Function,
    unchecked: Option<&BTreeSet<Bci>>,
    known: &std::collections::BTreeMap<Bci, i32>,
    e: &mut E,
) -> Result<(), Bci> {
    let params = f.param_count as usize;
    // The locals' values at entry, refused: the walk ends before its
    // first instruction.
    let entry: Bci = 0;
    let mut env: Vec<Lane<E::V, E::A>> = Vec::with_capacity(f.locals.len());
    for (l, loc) in f.locals.iter().enumerate() {
        let k = loc.ty.kind();
        env.push(if l == 0 {
            Lane::Idx
        } else if l < params && k == Kind::Ref {
            Lane::Arr(e.array(l).ok_or(entry)?)
        } else if l < params {
            Lane::Uniform(e.param(l, k).ok_or(entry)?, k)
        } else {
            Lane::Uniform(e.zero(k).ok_or(entry)?, k)
        });
    }
    let mut stack: Vec<Lane<E::V, E::A>> = Vec::new();
    let lane_kind = |k: Kind| matches!(k, Kind::I32 | Kind::F32);
    // A known compare's value, for the branch right after it.
    let mut branch: Option<(Bci, i32)> = None;
    let mut i = 0;
    while let Some(&inst) = f.body.get(i) {
        let bci = i as Bci;
        let last = i + 1 == f.body.len();
        let access = unchecked.is_none_or(|u| u.contains(&bci));
        e.before(&stack, &env);
        i += 1;
        match inst {
            Inst::Load { local } => stack.push(*env.get(local.index()).ok_or(bci)?),
            Inst::Store { local } => {
                let x = stack.pop().ok_or(bci)?;
                let l = local.index();
                let fits = match (x, f.locals.get(l).ok_or(bci)?.ty.kind()) {
                    (Lane::Uniform(_, a) | Lane::Varying(_, a), b) => lane_kind(a) && a == b,
                    (Lane::Idx32, Kind::I32)
                    | (Lane::Idx, Kind::I64)
                    | (Lane::Arr(_), Kind::Ref) => true,
                    _ => false,
                };
                if !fits {
                    return Err(bci);
                }
                env[l] = x;
            }
            Inst::I32Const { value } => {
                let c = e.constant(Kind::I32, value as u32).ok_or(bci)?;
                stack.push(Lane::Uniform(c, Kind::I32));
            }
            Inst::F32Const { value } => {
                let c = e.constant(Kind::F32, value.0).ok_or(bci)?;
                stack.push(Lane::Uniform(c, Kind::F32));
            }
            Inst::I64ToI32 => match stack.pop() {
                Some(Lane::Idx) => stack.push(Lane::Idx32),
                _ => return Err(bci),
            },
            // Widened again (in a proven chunk, inside `i32`): the number.
            Inst::I32ToI64 => match stack.pop() {
                Some(Lane::Idx32) => stack.push(Lane::Idx),
                _ => return Err(bci),
            },
            _ if known.contains_key(&bci) => {
                let (Some(Lane::Idx), Some(Lane::Idx)) = (stack.pop(), stack.pop()) else {
                    return Err(bci);
                };
                let c = known[&bci];
                let v = e.constant(Kind::I32, c as u32).ok_or(bci)?;
                stack.push(Lane::Uniform(v, Kind::I32));
                branch = Some((bci + 1, c));
            }
            Inst::BrIf { target } | Inst::BrUnless { target } => {
                let Some((_, c)) = branch.take().filter(|&(at, _)| at == bci) else {
                    return Err(bci);
                };
                stack.pop().ok_or(bci)?;
                let jumps = matches!(inst, Inst::BrIf { .. });
                if (c != 0) == jumps {
                    // Forward only: the walk never repeats an instruction.
                    if target.0 <= bci {
                        return Err(bci);
                    }
                    i = target.0 as usize;
                }
            }
            _ if simd_op(inst).is_some() => {
                let (k, op) = simd_op(inst).ok_or(bci)?;
                let (b, a) = (stack.pop().ok_or(bci)?, stack.pop().ok_or(bci)?);
                if a.kind() != Some(k) || b.kind() != Some(k) {
                    return Err(bci);
                }
                stack.push(e.binary(k, op, a, b).ok_or(bci)?);
            }
            Inst::I32ALoad | Inst::F32ALoad if access => {
                let k = if inst == Inst::I32ALoad {
                    Kind::I32
                } else {
                    Kind::F32
                };
                let (Some(Lane::Idx32), Some(Lane::Arr(arr))) = (stack.pop(), stack.pop()) else {
                    return Err(bci);
                };
                stack.push(Lane::Varying(e.load(k, arr).ok_or(bci)?, k));
            }
            Inst::I32AStore | Inst::F32AStore if access => {
                let k = if inst == Inst::I32AStore {
                    Kind::I32
                } else {
                    Kind::F32
                };
                let (Some(x), Some(Lane::Idx32), Some(Lane::Arr(arr))) =
                    (stack.pop(), stack.pop(), stack.pop())
                else {
                    return Err(bci);
                };
                if x.kind() != Some(k) {
                    return Err(bci);
                }
                e.store(k, arr, x).ok_or(bci)?;
            }
            Inst::Dup | Inst::Pop | Inst::Swap => {
                if super::shuffle(&mut stack, inst) != Some(true) {
                    return Err(bci);
                }
            }
            Inst::Ret if last && stack.is_empty() && f.ret.is_none() => {}
            _ => return Err(bci),
        }
    }
    Ok(())
}

/// The walk's check alone: makes nothing, refuses nothing.
pub(crate) struct Check;

impl LaneEmit for Check {
    type V = ();
    type A = ();
    fn param(&mut self, _: usize, _: Kind) -> Option<()> {
        Some(())
    }
    fn array(&mut self, _: usize) -> Option<()> {
        Some(())
    }
    fn zero(&mut self, _: Kind) -> Option<()> {
        Some(())
    }
    fn constant(&mut self, _: Kind, _: u32) -> Option<()> {
        Some(())
    }
    fn binary(
        &mut self,
        k: Kind,
        _: BinOp,
        a: Lane<(), ()>,
        b: Lane<(), ()>,
    ) -> Option<Lane<(), ()>> {
        Some(match (a, b) {
            (Lane::Uniform(..), Lane::Uniform(..)) => Lane::Uniform((), k),
            _ => Lane::Varying((), k),
        })
    }
    fn load(&mut self, _: Kind, _: ()) -> Option<()> {
        Some(())
    }
    fn store(&mut self, _: Kind, _: (), _: Lane<(), ()>) -> Option<()> {
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Check, walk};
    use offload_ir::{FuncId, parse_module, verify};

    /// The walk of `src`'s first function, trusting its accesses.
    fn check(src: &str) -> Result<(), u32> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        walk(
            v.func(FuncId::new(0)),
            None,
            &Default::default(),
            &mut Check,
        )
    }

    #[test]
    fn the_walk_stops_at_the_first_instruction_a_simd_body_cannot_have() {
        let k = |body: &str| {
            check(&format!(
                "kernel k(i: i64, a: f32, y: f32[], p: i32[]) {{\n local j: i32\n load i\n i64.to_i32\n store j\n{body}\n ret\n}}"
            ))
        };
        assert_eq!(k("load y\n load j\n load a\n f32.astore"), Ok(()));
        // bci 3 onwards is the body; `i32.mul` has no lane-wise form here.
        assert_eq!(
            k("load p\n load j\n load j\n load j\n i32.mul\n i32.astore"),
            Err(7)
        );
        // An element other than the lane's own.
        assert_eq!(k("load y\n i32.const 0\n load a\n f32.astore"), Err(6));
        // 64-bit arithmetic.
        assert_eq!(k("load i\n load i\n i64.add\n pop"), Err(5));
    }
}
