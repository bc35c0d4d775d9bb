//! Lockstep groups: kernels run as SIMD bodies, a lane per workitem, like a
//! GPU warp, when every branch is uniform — the same for every workitem of
//! the group ([`lockstep`]); the functions they call may branch per lane
//! ([`super::lane_call`]). Small straight-line kernels take
//! [`super::vectorizable`]'s SIMD groups first (the CPU lowering tries
//! those before these).
//!
//! What keeps such a group exact and its deopts where the scalar code has
//! them: the group writes nothing until its last part (every array store
//! comes after every branch and every check), and whatever could make a
//! workitem deopt or stop before then — a uniform index out of its array's
//! bounds (or a null array), a safepoint or interrupt seen at a loop's
//! back-edge — *abandons* the group: nothing it did is visible, and the
//! scalar item loop runs the same workitems from the first, deopting or
//! stopping exactly where it always does. Lanes compute what the scalar
//! code computes, operation for operation, in each workitem's order: the
//! vector unit's add, sub, mul, div and sqrt of `f32` lanes are IEEE's, as
//! the scalar ones.

use offload_ir::isa::{BinOp, Op};
use offload_ir::{Bci, FuncId, Inst, Kind};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// What the lockstep lowering knows of a value or a local: the same for
/// every lane (`U`, a scalar), one per lane (`V`, a vector), consecutive
/// `i32`s (`Aff`: lane `l` holds `base + l`, only `base` is kept), the
/// workitem number (`Idx`, `i64`; `Idx32`, narrowed to `i32`), an array
/// parameter (`Arr`), or — a local not yet written — nothing (`Unset`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum LKind {
    U(Kind),
    V(Kind),
    Aff,
    Idx,
    Idx32,
    Arr,
    Unset,
}

/// A kernel's lockstep plan ([`lockstep`]).
#[derive(Clone, Debug)]
pub(crate) struct Lockstep {
    /// What each local holds throughout the kernel.
    pub(crate) locals: Vec<LKind>,
    /// For a local holding an array (`Arr`), the parameter whose array it
    /// is: itself, or the one every store to it copies.
    pub(crate) arrays: Vec<Option<usize>>,
    /// The first instruction of each basic block.
    pub(crate) leaders: BTreeSet<Bci>,
    /// Array loads with a uniform index: checked, and abandoning the group
    /// when out of bounds.
    pub(crate) uniform_loads: HashSet<Bci>,
    /// Array loads at consecutive indices (`Aff`): one vector load,
    /// checked likewise.
    pub(crate) runs: HashSet<Bci>,
    /// `i32` divisions and remainders by a uniform divisor: the group is
    /// abandoned when it is 0 (the scalar code throws) or -1 (the one
    /// quotient that overflows; the scalar code has its own rule).
    pub(crate) divs: HashSet<Bci>,
    /// Those of consecutive dividends (`i / n`, `i % n`): abandoned too
    /// unless the divisor is positive, the first dividend is not negative
    /// and the lanes do not straddle a multiple of the divisor — then the
    /// quotient is uniform and the remainders consecutive.
    pub(crate) run_divs: HashSet<Bci>,
    /// The first store, when its index is consecutive lanes but not the
    /// proven workitem number (`c = i * w + j` of a 2-D kernel): one
    /// vector store, checked as a run — out of bounds, the group is
    /// abandoned, having written nothing yet.
    pub(crate) run_stores: HashSet<Bci>,
    /// `i64` compares whose result is known where the group runs (the
    /// source language's test that an `i64` index survives its narrowing,
    /// `super::workitem_tests`), with the result.
    pub(crate) known: HashMap<Bci, i32>,
    /// Blocks no group reaches: after a branch on a known compare, the
    /// side not taken (the test's `throw`).
    pub(crate) dead: BTreeSet<Bci>,
}

/// What [`lockstep`]'s interpretation collects about instructions.
#[derive(Default)]
struct Facts {
    /// The kernel's parameter count (copies of arrays are the locals past
    /// them).
    params: usize,
    /// Loads of a parameter right before an `i64.to_i32`.
    narrowing_loads: HashSet<Bci>,
    uniform_loads: HashSet<Bci>,
    runs: HashSet<Bci>,
    divs: HashSet<Bci>,
    run_divs: HashSet<Bci>,
    known: HashMap<Bci, i32>,
    run_stores: HashSet<Bci>,
    /// The group runs in a chunk proven inside every unchecked access's
    /// array (so its workitem numbers fit `i32`).
    proven: bool,
}

impl Lockstep {
    /// What local `l` reads as.
    pub(crate) fn local(&self, l: usize) -> LKind {
        self.locals[l]
    }
}

/// The join of what two writes left in a local, or `None` when a lane
/// value cannot hold both.
fn join(a: LKind, b: LKind) -> Option<LKind> {
    use LKind::{Aff, Idx32, U, Unset, V};
    Some(match (a, b) {
        (Unset, x) | (x, Unset) => x,
        (x, y) if x == y => x,
        (U(k) | V(k), U(j) | V(j)) if k == j => V(k),
        (Aff, U(Kind::I32) | V(Kind::I32)) | (U(Kind::I32) | V(Kind::I32), Aff) => V(Kind::I32),
        (Idx32, _) | (_, Idx32) => return None,
        _ => return None,
    })
}

/// Whether kernel `k` runs as lockstep groups, and how: its values are
/// `i32` and `f32` (and the workitem number), every branch's condition is
/// uniform, and its instructions are among those the lowering knows —
/// calls of lane functions (`super::lane_call`: inlined on the lanes, their
/// own branches made selects), lane-wise `add`, `sub`, `mul`, `div`,
/// `sqrt`, `exp` and `log` of `f32` and
/// `add`, `sub`, `mul`, `and`, `or`, `xor` of `i32`, and `div` and `rem`
/// of `i32` by a uniform divisor (guarded: 0 and -1 abandon the group); any
/// arithmetic and
/// comparison of uniform `i32` and `f32` values, and conversion between
/// them, that cannot deopt; array
/// loads indexed by the workitem number (one of `unchecked`, proven in
/// bounds for the chunk), by a uniform index or by one per lane (checked:
/// the group is abandoned when any is out of bounds); array stores indexed
/// by the
/// workitem number, all after the last branch and checked load, and a
/// first store at consecutive indices (checked as a run before anything is
/// written); `i64` parameters read only to be narrowed to `i32` (a range's
/// shape); locals
/// holding the workitem number (`i64` copies of it, or it narrowed to
/// `i32`), every store to one storing it. In a chunk where `unchecked`
/// holds (its indices inside `[0, length)`, so inside `i32`), the
/// narrowed number widened again is the number, and the compares of
/// `known` have their known result: a branch on one goes one way only,
/// and its other side (the `throw` of the source language's `i64` index
/// test) is a dead block no group enters.
pub(crate) fn lockstep(
    v: &offload_ir::Verified,
    k: FuncId,
    unchecked: &BTreeSet<Bci>,
    known: &BTreeMap<Bci, i32>,
) -> Option<Lockstep> {
    let f = v.func(k);
    let n = f.body.len();
    if n == 0 || f.ret.is_some() {
        return None;
    }
    let params = f.param_count as usize;
    let mut locals: Vec<LKind> = f
        .locals
        .iter()
        .enumerate()
        .map(|(l, loc)| match loc.ty.kind() {
            _ if l == 0 => LKind::Idx,
            Kind::Ref if l < params => LKind::Arr,
            k @ (Kind::I32 | Kind::F32) if l < params => LKind::U(k),
            // A kernel's own locals, and 64-bit parameters (which may sit
            // unread; a read of one is rejected in `step`).
            _ => LKind::Unset,
        })
        .collect();
    let kinds: Vec<Kind> = f.locals.iter().map(|l| l.ty.kind()).collect();
    // Basic blocks.
    let mut leaders = BTreeSet::from([0 as Bci]);
    let first_store = f
        .body
        .iter()
        .position(|i| matches!(i, Inst::I32AStore | Inst::F32AStore))
        .unwrap_or(n);
    // The compares known where the group runs: only in a chunk proven
    // inside the arrays of the unchecked accesses.
    let known: HashMap<Bci, i32> = if unchecked.is_empty() {
        HashMap::new()
    } else {
        known.iter().map(|(&b, &x)| (b, x)).collect()
    };
    for (bci, inst) in f.body.iter().enumerate() {
        if let Some(t) = inst.target() {
            // A branch on a known compare goes one way: after the first
            // store too (`a[i] += x; b[i] += y` with an `i64` index tests
            // the index before each).
            let decided = matches!(inst, Inst::BrIf { .. } | Inst::BrUnless { .. })
                && bci
                    .checked_sub(1)
                    .is_some_and(|c| known.contains_key(&(c as Bci)));
            if !decided && (bci >= first_store || t as usize > first_store) {
                return None;
            }
            leaders.insert(t);
            leaders.insert(bci as Bci + 1);
        }
        if matches!(inst, Inst::Ret) && bci + 1 < n {
            leaders.insert(bci as Bci + 1);
        }
    }
    let copies = super::indexed::param_copies(v, k, &leaders.iter().copied().collect());
    let mut arrays: Vec<Option<usize>> = (0..locals.len())
        .map(|l| (locals[l] == LKind::Arr).then_some(l))
        .collect();
    for (l, c) in copies.iter().enumerate() {
        if let Some(p) = *c {
            locals[l] = LKind::Arr;
            arrays[l] = Some(p as usize);
        }
    }
    // Locals of the kernel's own are lane values, `i32` or `f32`, copies
    // of an array parameter, or `i64` copies of the workitem number (every
    // store to one stores it: `step`).
    if (params..kinds.len())
        .any(|l| !matches!(kinds[l], Kind::I32 | Kind::F32 | Kind::I64) && arrays[l].is_none())
    {
        return None;
    }
    let mut facts = Facts {
        params,
        narrowing_loads: f
            .body
            .windows(2)
            .enumerate()
            .filter(|(_, w)| {
                matches!(w, [Inst::Load { local }, Inst::I64ToI32] if local.index() < params)
            })
            .map(|(b, _)| b as Bci)
            .collect(),
        ..Facts::default()
    };
    facts.proven = !unchecked.is_empty();
    facts.known = known;
    let edges = live_edges(&f.body, &leaders, &facts.known);
    let dead: BTreeSet<Bci> = leaders
        .iter()
        .copied()
        .filter(|b| !edges.contains_key(b))
        .collect();
    // A block may leave values on the operand stack (the source language
    // loads the array of `a[i] = x`, and the left operand of `x[j] - x[i]`,
    // before the test of an `i64` index) for its one successor a group
    // takes, when that block is the next one the lowering walks to and has
    // no other predecessor: the lowering's walk carries them in, and the
    // block that computed them dominates the one that uses them. Their
    // stack, by leader.
    let mut preds: HashMap<Bci, usize> = HashMap::new();
    for t in edges.values().flatten() {
        *preds.entry(*t).or_default() += 1;
    }
    let mut entry: HashMap<Bci, Vec<LKind>> = HashMap::new();
    // Abstract interpretation to a fixed point: each block from an empty
    // stack (required at every block boundary) with what the locals hold.
    loop {
        let before = locals.clone();
        let starts: Vec<usize> = leaders.iter().map(|&b| b as usize).collect();
        for (i, &s) in starts.iter().enumerate() {
            if dead.contains(&(s as Bci)) {
                continue;
            }
            let end = starts.get(i + 1).copied().unwrap_or(n);
            let mut stack: Vec<LKind> = entry.get(&(s as Bci)).cloned().unwrap_or_default();
            for bci in s..end {
                let inst = f.body[bci];
                if !step(
                    v,
                    &mut stack,
                    &mut locals,
                    &kinds,
                    inst,
                    bci,
                    unchecked,
                    first_store,
                    &mut facts,
                ) {
                    return None;
                }
            }
            if !stack.is_empty() {
                let next = starts[i + 1..]
                    .iter()
                    .map(|&b| b as Bci)
                    .find(|b| !dead.contains(b));
                let carried = matches!(
                    (edges[&(s as Bci)].as_slice(), next),
                    ([t], Some(u)) if *t == u && preds[t] == 1
                );
                if !carried {
                    return None;
                }
                entry.insert(next.expect("checked"), stack);
            }
        }
        if locals == before {
            break;
        }
    }
    // A store checked as a run writes its lanes' elements before any lane
    // goes on, so another lane's later access there would see them early
    // (`u[i - 1] = x; y = u[i]`): a race between workitems, which may see
    // each other's writes in any order, but a group keeps to what one
    // workitem after another would see here — the run store is the
    // kernel's last access.
    if !facts.run_stores.is_empty()
        && f.body[first_store + 1..].iter().any(|i| {
            matches!(
                i,
                Inst::I32ALoad | Inst::F32ALoad | Inst::I32AStore | Inst::F32AStore
            )
        })
    {
        return None;
    }
    // A local holding the narrowed workitem number holds only it: every
    // store to it stores it (`join`), and the verifier's definite
    // assignment rules out a read before the first.
    Some(Lockstep {
        locals,
        arrays,
        leaders,
        uniform_loads: facts.uniform_loads,
        runs: facts.runs,
        divs: facts.divs,
        run_divs: facts.run_divs,
        known: facts.known,
        run_stores: facts.run_stores,
        dead,
    })
}

/// The successors of each block (by leader) that a group can take: both
/// sides of a branch, but only the decided side of a branch right after a
/// compare of `known`. Blocks no path from the entry reaches are absent.
fn live_edges(
    body: &[Inst],
    leaders: &BTreeSet<Bci>,
    known: &HashMap<Bci, i32>,
) -> BTreeMap<Bci, Vec<Bci>> {
    let block_end = |s: Bci| {
        leaders
            .range(s + 1..)
            .next()
            .map_or(body.len(), |&e| e as usize)
    };
    let mut edges = BTreeMap::new();
    let mut work = vec![0 as Bci];
    while let Some(s) = work.pop() {
        if edges.contains_key(&s) {
            continue;
        }
        let last = block_end(s) - 1;
        let inst = body[last];
        let decided = last
            .checked_sub(1)
            .and_then(|c| known.get(&(c as Bci)))
            .map(|&x| (x != 0) == matches!(inst, Inst::BrIf { .. }));
        let mut next = Vec::new();
        match inst {
            Inst::Br { target } => next.push(target.0),
            Inst::BrIf { target } | Inst::BrUnless { target } => match decided {
                Some(true) => next.push(target.0),
                Some(false) => next.push(last as Bci + 1),
                None => next.extend([target.0, last as Bci + 1]),
            },
            Inst::Ret | Inst::Throw { .. } => {}
            _ => next.push(last as Bci + 1),
        }
        next.retain(|&t| (t as usize) < body.len());
        work.extend(&next);
        edges.insert(s, next);
    }
    edges
}

/// One instruction of [`lockstep`]'s interpretation; false when the kernel
/// cannot run in lockstep.
#[allow(clippy::too_many_arguments)]
fn step(
    v: &offload_ir::Verified,
    stack: &mut Vec<LKind>,
    locals: &mut [LKind],
    kinds: &[Kind],
    inst: Inst,
    bci: usize,
    unchecked: &BTreeSet<Bci>,
    first_store: usize,
    facts: &mut Facts,
) -> bool {
    use LKind::{Aff, Arr, Idx, Idx32, U, Unset, V};
    let num =
        |x: LKind, k: Kind| matches!(x, U(j) | V(j) if j == k) || (x == Aff && k == Kind::I32);
    let read = |l: usize, locals: &[LKind]| match locals[l] {
        Unset => U(kinds[l]),
        x => x,
    };
    match inst {
        Inst::Load { local } => {
            let x = read(local.index(), locals);
            // An `i64` parameter (never assigned: a store of an `i64`
            // value is refused) is read only to narrow it (a range's
            // shape, `offload_lang::ranges`).
            let narrowed_param = x == U(Kind::I64) && facts.narrowing_loads.contains(&(bci as Bci));
            if matches!(x, U(Kind::I64 | Kind::F64 | Kind::Ref)) && !narrowed_param {
                return false;
            }
            stack.push(x);
        }
        Inst::Store { local } => {
            let l = local.index();
            let Some(x) = stack.pop() else { return false };
            // An `i64` copy of the workitem number.
            if x == Idx && l >= facts.params && kinds[l] == Kind::I64 {
                if !matches!(locals[l], Unset | Idx) {
                    return false;
                }
                locals[l] = Idx;
                return true;
            }
            // The index, arrays and narrowed index are written only as
            // the kernel starts (an `Idx32` local once, in the entry block).
            let fits = match x {
                U(k) | V(k) => k == kinds[l] && matches!(k, Kind::I32 | Kind::F32),
                Aff => kinds[l] == Kind::I32,
                Idx32 => kinds[l] == Kind::I32,
                _ => false,
            };
            if x == Arr && locals[l] == Arr && l >= facts.params {
                // A copy of a parameter's array (`param_copies`).
                return true;
            }
            if !fits || matches!(locals[l], Idx | Arr) {
                return false;
            }
            let Some(j) = join(locals[l], x) else {
                return false;
            };
            locals[l] = j;
        }
        Inst::Inc { local, .. } => {
            let l = local.index();
            if kinds[l] != Kind::I32 || !matches!(locals[l], U(_) | Unset) {
                return false;
            }
            locals[l] = U(Kind::I32);
        }
        Inst::I32Const { .. } => stack.push(U(Kind::I32)),
        Inst::F32Const { .. } => stack.push(U(Kind::F32)),
        Inst::I64ToI32 => match stack.pop() {
            Some(Idx) => stack.push(Idx32),
            Some(U(Kind::I64)) => stack.push(U(Kind::I32)),
            _ => return false,
        },
        Inst::Br { .. } => {}
        Inst::BrIf { .. } | Inst::BrUnless { .. } => {
            if stack.pop() != Some(U(Kind::I32)) {
                return false;
            }
        }
        Inst::I32ALoad | Inst::F32ALoad => {
            let k = if inst == Inst::I32ALoad {
                Kind::I32
            } else {
                Kind::F32
            };
            let (Some(idx), Some(Arr)) = (stack.pop(), stack.pop()) else {
                return false;
            };
            match idx {
                Idx32 if unchecked.contains(&(bci as Bci)) => stack.push(V(k)),
                U(Kind::I32) if bci < first_store => {
                    facts.uniform_loads.insert(bci as Bci);
                    stack.push(U(k));
                }
                Aff | Idx32 if bci < first_store => {
                    facts.runs.insert(bci as Bci);
                    stack.push(V(k));
                }
                _ => return false,
            }
        }
        Inst::I32AStore | Inst::F32AStore => {
            let k = if inst == Inst::I32AStore {
                Kind::I32
            } else {
                Kind::F32
            };
            let (Some(x), Some(idx), Some(Arr)) = (stack.pop(), stack.pop(), stack.pop()) else {
                return false;
            };
            match idx {
                Idx32 if unchecked.contains(&(bci as Bci)) => {}
                // Consecutive elements, checked as a run — by the first
                // store only, before the group has written anything.
                Aff | Idx32 if bci == first_store => {
                    facts.run_stores.insert(bci as Bci);
                }
                _ => return false,
            }
            if !num(x, k) {
                return false;
            }
        }
        Inst::Dup | Inst::Pop | Inst::Swap => {
            if super::shuffle(stack, inst) != Some(true) {
                return false;
            }
        }
        Inst::Ret => {
            if !stack.is_empty() {
                return false;
            }
        }
        Inst::Call { func } => {
            // Inlined on the lanes, its branches made selects.
            if !super::lane_call::lane_function(v, func) {
                return false;
            }
            let g = v.func(func);
            for p in g.params().iter().rev() {
                let x = match stack.pop() {
                    Some(Idx32) => Aff,
                    Some(x) => x,
                    None => return false,
                };
                if !num(x, p.ty.kind()) {
                    return false;
                }
            }
            let Some(r) = g.ret else { return false };
            stack.push(V(r.kind()));
        }
        _ => match inst.opcode().op() {
            Op::Binary(k @ (Kind::I32 | Kind::F32), op) => {
                let (Some(b), Some(a)) = (stack.pop(), stack.pop()) else {
                    return false;
                };
                // The narrowed workitem number as an operand: consecutive.
                let lane = |x: LKind| if x == Idx32 { Aff } else { x };
                let (a, b) = (lane(a), lane(b));
                if !num(a, k) || !num(b, k) {
                    return false;
                }
                let uniform = a == U(k) && b == U(k);
                let divisor = b == U(Kind::I32) && bci < first_store;
                let r = match (k, op, a, b) {
                    (Kind::I32, BinOp::Div | BinOp::Rem, Aff, _) if divisor => {
                        facts.run_divs.insert(bci as Bci);
                        if op == BinOp::Div { U(k) } else { Aff }
                    }
                    (Kind::I32, BinOp::Div | BinOp::Rem, _, _) if divisor => {
                        facts.divs.insert(bci as Bci);
                        if uniform { U(k) } else { V(k) }
                    }
                    (Kind::I32, BinOp::Div | BinOp::Rem, _, _) => return false,
                    (_, _, U(_), U(_)) if uniform_binary(k, op) => U(k),
                    (Kind::I32, BinOp::Add, Aff, U(_)) | (Kind::I32, BinOp::Add, U(_), Aff) => Aff,
                    (Kind::I32, BinOp::Sub, Aff, U(_)) => Aff,
                    (_, _, U(_), U(_)) => return false,
                    _ if super::lane_call::lane_binary(k, op) => V(k),
                    _ => return false,
                };
                stack.push(r);
            }
            Op::Unary(Kind::F32, op) if super::lane_call::lane_unary(op) => {
                let Some(a) = stack.pop() else { return false };
                if !num(a, Kind::F32) {
                    return false;
                }
                stack.push(a);
            }
            Op::Convert(from @ (Kind::I32 | Kind::F32), to @ (Kind::I32 | Kind::F32))
                if from != to =>
            {
                if stack.pop() != Some(U(from)) {
                    return false;
                }
                stack.push(U(to));
            }
            // The narrowed workitem number widened again: the number, in
            // a chunk proven inside `[0, length)`.
            Op::Convert(Kind::I32, Kind::I64) if facts.proven => {
                if stack.pop() != Some(Idx32) {
                    return false;
                }
                stack.push(Idx);
            }
            Op::Compare(Kind::I64, _) if facts.known.contains_key(&(bci as Bci)) => {
                if (stack.pop(), stack.pop()) != (Some(Idx), Some(Idx)) {
                    return false;
                }
                stack.push(U(Kind::I32));
            }
            Op::Compare(k @ (Kind::I32 | Kind::F32), _) => {
                let (Some(b), Some(a)) = (stack.pop(), stack.pop()) else {
                    return false;
                };
                if a != U(k) || b != U(k) {
                    return false;
                }
                stack.push(U(Kind::I32));
            }
            _ => return false,
        },
    }
    true
}

/// Uniform arithmetic the lockstep lowering computes once, as the scalar
/// code does: everything of `i32` and `f32` that cannot deopt and needs no
/// call (`rem` and `pow` of floats do); `i32` `div` and `rem` are guarded
/// apart (`Lockstep::divs`).
fn uniform_binary(k: Kind, op: BinOp) -> bool {
    match op {
        BinOp::Div | BinOp::Rem => k == Kind::F32 && op == BinOp::Div,
        BinOp::Pow => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::opt::test_support::example;
    use crate::cpu::opt::workitem_indexed;
    use offload_ir::{parse_module, verify};

    /// The plan of the first function of `src`, with its workitem-indexed
    /// accesses unchecked (as the CPU lowering has them).
    fn plan(src: &str) -> Option<Lockstep> {
        plan_of(src, 0)
    }

    /// The plan of function `k` of `src`.
    fn plan_of(src: &str, k: usize) -> Option<Lockstep> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = FuncId::new(k);
        let a = offload_ir::analysis::analyze(&v, k);
        let unchecked = workitem_indexed(&v, k, &a).into_keys().collect();
        let known = crate::cpu::opt::workitem_tests(&v, k, &a);
        lockstep(&v, k, &unchecked, &known)
    }

    const SUM: &str = "kernel sum(i: i64, n: i32, a: f32[], out: f32[]) {
    local j: i32
    local b: i32
    local acc: f32
    load i
    i64.to_i32
    store b
    i32.const 0
    store j
    f32.const 0.0
    store acc
  loop:
    load j
    load n
    i32.ge
    br_if done
    load acc
    load a
    load j
    f32.aload
    load a
    load b
    f32.aload
    f32.mul
    f32.add
    store acc
    inc j 1
    br loop
  done:
    load out
    load b
    load acc
    f32.astore
    ret
}";

    /// `SUM` as the source language writes it with an `i64` index: the
    /// store's index is an `i64` copy of the workitem number, narrowed and
    /// tested to survive the narrowing (`throw` if not), with the array
    /// loaded before the test.
    const WIDE_SUM: &str = "kernel sum(i: i64, n: i32, a: f32[], out: f32[]) {
    local j: i32
    local b: i32
    local acc: f32
    local wide: i64
    local narrow: i32
    load i
    i64.to_i32
    store b
    i32.const 0
    store j
    f32.const 0.0
    store acc
  loop:
    load j
    load n
    i32.ge
    br_if done
    load acc
    load a
    load j
    f32.aload
    load a
    load b
    f32.aload
    f32.mul
    f32.add
    store acc
    inc j 1
    br loop
  done:
    load out
    load i
    store wide
    load wide
    i64.to_i32
    store narrow
    load narrow
    i32.to_i64
    load wide
    i64.eq
    br_if fits
    throw IndexOutOfBounds
  fits:
    load narrow
    load acc
    f32.astore
    ret
}";

    #[test]
    fn an_i64_index_tested_after_its_narrowing_runs_in_lockstep() {
        let p = plan(WIDE_SUM).expect("lockstep");
        assert_eq!(p.locals[7..].to_vec(), [LKind::Idx, LKind::Idx32]);
        // The test (bci 32) is known to hold; the `throw` after its branch
        // is a block no group enters.
        assert_eq!(p.known.get(&32), Some(&1));
        assert_eq!(p.dead.iter().copied().collect::<Vec<_>>(), [34]);
        // Checked without the proof (no unchecked access), it is not.
        let v = verify(parse_module("t.obc", WIDE_SUM).unwrap()).unwrap();
        let k = FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        let known = crate::cpu::opt::workitem_tests(&v, k, &a);
        assert!(lockstep(&v, k, &BTreeSet::new(), &known).is_none());
    }

    /// A 2-D kernel with `i32` indices as the front end writes it
    /// (`offload_lang::ranges`): the flat number decoded by `i32`
    /// division by a narrowed `i64` shape parameter, then `u[i * w + j]`.
    const ROWS: &str = "kernel k(f: i64, t: f32[], u: f32[], w: i32, lo0: i64, lo1: i64, n1: i64) {
    local ff: i32
    local m: i32
    local q: i32
    local r: i32
    local c: i32
    load f
    i64.to_i32
    store ff
    load n1
    i64.to_i32
    store m
    load ff
    load m
    i32.div
    store q
    load ff
    load m
    i32.rem
    store r
    load lo0
    i64.to_i32
    load q
    i32.add
    load w
    i32.mul
    load lo1
    i64.to_i32
    load r
    i32.add
    i32.add
    store c
    load u
    load c
    load t
    load c
    i32.const 1
    i32.sub
    f32.aload
    f32.astore
    ret
}";

    #[test]
    fn a_2d_decode_runs_in_lockstep_with_its_store_checked_as_a_run() {
        let p = plan(ROWS).expect("lockstep");
        // The row is the same for every lane, the column consecutive.
        assert_eq!(
            p.locals[9..].to_vec(),
            [LKind::U(Kind::I32), LKind::Aff, LKind::Aff]
        );
        assert_eq!(p.run_divs, HashSet::from([8, 12]));
        // `t[c - 1]` (bci 32) is a checked run; so is the store (bci 33),
        // the first and only one.
        assert_eq!(p.runs, HashSet::from([32]));
        assert_eq!(p.run_stores, HashSet::from([33]));
        // An `i64` parameter read for anything but narrowing is refused.
        let wide = ROWS.replace(
            "    load lo1\n    i64.to_i32\n",
            "    load lo1\n    load lo1\n    i64.add\n    i64.to_i32\n",
        );
        assert!(plan(&wide).is_none());
    }

    #[test]
    fn a_uniform_loop_runs_in_lockstep_and_says_what_each_local_holds() {
        let p = plan(SUM).expect("lockstep");
        assert_eq!(
            p.locals[1..].to_vec(),
            [
                LKind::U(Kind::I32),
                LKind::Arr,
                LKind::Arr,
                LKind::U(Kind::I32),
                LKind::Idx32,
                LKind::V(Kind::F32)
            ]
        );
        // `a[j]` (bci 14) is uniform and checked; `a[b]` and `out[b]` are
        // the workitem's own, proven in bounds.
        assert_eq!(p.uniform_loads, HashSet::from([14]));
        assert!(plan(&example("nbody.obc")).is_some());
        // The source language's `out[b] += x` reads `out` and `b` into
        // locals of its own first, after the loop: still lockstep.
        let copied = SUM
            .replace("    local acc: f32\n", "    local acc: f32\n    local tmp: f32[]\n    local t1: i32\n")
            .replace(
                "    load out\n    load b\n    load acc\n    f32.astore",
                "    load out\n    store tmp\n    load b\n    store t1\n    load tmp\n    load t1\n    load acc\n    f32.astore",
            );
        let c = plan(&copied).expect("copies of the array and index");
        assert_eq!(c.arrays[7], Some(3));
        assert_eq!(c.locals[8], LKind::Idx32);
        // matmul: `row = i / n` uniform and `col = i % n` consecutive
        // (guarded), `a[row * n + k]` uniform and `b[k * n + col]` one
        // vector load.
        let mm = plan(&example("matmul.obc")).expect("matmul in lockstep");
        assert_eq!(
            (mm.run_divs.len(), mm.uniform_loads.len(), mm.runs.len()),
            (2, 1, 1)
        );
        assert_eq!(mm.locals[5..7], [LKind::U(Kind::I32), LKind::Aff]);
    }

    #[test]
    fn lane_dependent_branches_stores_in_loops_and_divisions_are_not_lockstep() {
        // The loop's exit depends on the workitem's own values.
        let varying = SUM.replace(
            "    load j\n    load n\n    i32.ge",
            "    load acc\n    f32.const 4.0\n    f32.gt",
        );
        assert!(plan(&varying).is_none());
        assert!(plan(&example("mandelbrot.obc")).is_none());
        // A store before the last branch: the group could not be abandoned.
        let store_in_loop = SUM.replace(
            "    inc j 1\n",
            "    load out\n    load b\n    load acc\n    f32.astore\n    inc j 1\n",
        );
        assert!(plan(&store_in_loop).is_none());
        // Consecutive indices, `b + j`: one checked vector load.
        let shifted = SUM.replace(
            "    load a\n    load b\n    f32.aload",
            "    load a\n    load b\n    load j\n    i32.add\n    f32.aload",
        );
        assert_eq!(plan(&shifted).expect("consecutive").runs.len(), 1);
        // Any other lane index (a gather): not in lockstep.
        let strided = SUM.replace(
            "    load a\n    load b\n    f32.aload",
            "    load a\n    load b\n    load b\n    i32.mul\n    f32.aload",
        );
        assert_ne!(strided, SUM);
        assert!(plan(&strided).is_none());
        // Consecutive indices stored to, `b + 1`: one checked vector store
        // (the first store).
        let shifted_store = SUM.replace(
            "    load out\n    load b\n    load acc\n    f32.astore",
            "    load out\n    load b\n    i32.const 1\n    i32.add\n    load acc\n    f32.astore",
        );
        assert_ne!(shifted_store, SUM);
        assert_eq!(
            plan(&shifted_store).expect("consecutive").run_stores.len(),
            1
        );
        // ... when it is the kernel's last access: a later one could see
        // another lane's element stored early (`u[i - 1] = x; y = u[i]`).
        let then_load = shifted_store.replace(
            "    f32.astore\n    ret",
            "    f32.astore\n    load out\n    load b\n    load a\n    load b\n    f32.aload\n    f32.astore\n    ret",
        );
        assert_ne!(then_load, shifted_store);
        assert!(plan(&then_load).is_none());
        // Any other lane index stored to: a scatter.
        let scatter = SUM.replace(
            "    load out\n    load b\n    load acc\n    f32.astore",
            "    load out\n    load b\n    load b\n    i32.mul\n    load acc\n    f32.astore",
        );
        assert!(plan(&scatter).is_none());
        // A division by a lane value (each lane could throw alone).
        let by_lane = SUM.replace(
            "    load a\n    load j\n    f32.aload",
            "    load a\n    load j\n    load b\n    i32.div\n    f32.aload",
        );
        assert_ne!(by_lane, SUM);
        assert!(plan(&by_lane).is_none());
    }

    #[test]
    fn straight_line_kernels_with_lane_function_calls_run_in_lockstep() {
        // blackscholes calls `cnd` (a branch on each lane's sign, `exp`)
        // four times, and takes `log`, `exp` and `sqrt` of its lanes.
        let bs = plan_of(&example("blackscholes.obc"), 1).expect("blackscholes in lockstep");
        assert!(bs.uniform_loads.is_empty() && bs.runs.is_empty());
        // A call of a function with a loop is not inlined on lanes.
        let looped = example("blackscholes.obc").replace(
            "    store w\n    ; cnd(d) = w",
            "    store w\n  spin:\n    load d\n    f32.const 9.0\n    f32.gt\n    br_if spin\n    ; cnd(d) = w",
        );
        assert_ne!(looped, example("blackscholes.obc"));
        assert!(plan_of(&looped, 1).is_none());
    }
}
