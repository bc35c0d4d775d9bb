//! Array accesses indexed by the workitem number ([`workitem_indexed`]).

use super::{kept_below, shared_step};
use offload_ir::analysis::FuncAnalysis;
use offload_ir::{Bci, FuncId};

/// What [`workitem_indexed`] knows of a value.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Sym {
    Other,
    /// The workitem number (parameter 0, never assigned).
    Workitem,
    /// The workitem number as `i32` (`i64.to_i32` of it).
    WorkitemI32,
    /// The value of reference parameter `l`, which the kernel never assigns.
    Param(u32),
}

/// The array accesses of kernel `k` whose index is the workitem number
/// (converted to `i32`) and whose array is a reference parameter the kernel
/// never assigns, by bytecode index, with that parameter's local index.
///
/// For a chunk `[lo, hi)` with `0 <= lo` and `hi <= length` of each such
/// array, none of these accesses can fail (a null array has length 0, so
/// the condition also excludes null), and a backend may run the chunk in a
/// version of the body without their checks. The analysis is a forward
/// walk of the operand stack within each basic block (a value crossing a
/// block boundary is unknown), and a local counts as the workitem number
/// (or that number as `i32`) only when every store to it stores that
/// number and nothing increments it
/// (the verifier's definite assignment rules out a read before the first
/// store). A reference local counts as a parameter's array when every store
/// to it stores that parameter, loaded just before ([`param_copies`]: the
/// source language's `a[i] += x` reads `a` into such a local once).
/// Accesses in inlined callees are not covered.
pub(crate) fn workitem_indexed(
    v: &offload_ir::Verified,
    k: FuncId,
    a: &FuncAnalysis,
) -> std::collections::BTreeMap<Bci, u32> {
    walk(v, k, a).0
}

/// The `i64` compares of kernel `k` whose result is known wherever
/// [`workitem_indexed`]'s accesses are proven (a chunk inside `[0,
/// length)` of an array, so inside `i32`): by bytecode index, the value
/// (1 or 0) of each `i64.eq` or `i64.ne` of the workitem number with
/// itself — the source language's test that an `i64` index survives its
/// narrowing to `i32` (`narrow as i64 == wide`), which the unchecked
/// version of the body need not make. Empty when no access is proven.
pub(crate) fn workitem_tests(
    v: &offload_ir::Verified,
    k: FuncId,
    a: &FuncAnalysis,
) -> std::collections::BTreeMap<Bci, i32> {
    let (accesses, tests) = walk(v, k, a);
    if accesses.is_empty() {
        return Default::default();
    }
    tests
}

/// [`workitem_indexed`] and [`workitem_tests`] in one walk.
fn walk(
    v: &offload_ir::Verified,
    k: FuncId,
    a: &FuncAnalysis,
) -> (
    std::collections::BTreeMap<Bci, u32>,
    std::collections::BTreeMap<Bci, i32>,
) {
    use offload_ir::isa::{CmpOp, Op};
    use offload_ir::{Inst, Kind};
    let f = v.func(k);
    let frames = &v.types(k).frames;
    let params = f.param_count as usize;
    let mut assigned = vec![false; f.locals.len()];
    for inst in &f.body {
        if let Inst::Store { local } | Inst::Inc { local, .. } = *inst {
            assigned[local.index()] = true;
        }
    }
    let mut out = std::collections::BTreeMap::new();
    let mut tests = std::collections::BTreeMap::new();
    if params == 0 || assigned[0] || f.locals[0].ty.kind() != Kind::I64 {
        return (out, tests);
    }
    let leaders: std::collections::HashSet<Bci> = a.cfg.blocks.iter().map(|b| b.start).collect();
    let copies = param_copies(v, k, &leaders);
    // Candidates for "holds the workitem number as i32": assigned, non-
    // parameter i32 locals; refined until every store to one stores it.
    let mut wi32: Vec<bool> = (0..f.locals.len())
        .map(|l| l >= params && f.locals[l].ty.kind() == Kind::I32)
        .collect();
    // The same for "holds the workitem number": non-parameter i64 locals
    // (the source language copies an `i64` index into one before it
    // narrows it for an access: `wide = i; narrow = wide as i32; if narrow
    // as i64 != wide { throw }; a[narrow]`).
    let mut wi64: Vec<bool> = (0..f.locals.len())
        .map(|l| l >= params && f.locals[l].ty.kind() == Kind::I64)
        .collect();
    let blocks = &a.cfg.blocks;
    loop {
        out.clear();
        tests.clear();
        let mut changed = false;
        let mut stack: Vec<Sym> = Vec::new();
        // Per block, the stack after its last instruction (once walked).
        let mut exits: Vec<Option<Vec<Sym>>> = vec![None; blocks.len()];
        for (bci, &inst) in f.body.iter().enumerate() {
            let Some(frame) = frames[bci].as_ref() else {
                continue;
            };
            let depth = frame.stack.len();
            if leaders.contains(&(bci as Bci)) {
                // What every predecessor left, where they agree (a
                // predecessor not yet walked, a back edge's, is unknown):
                // an array parameter loaded before a bounds test's branch
                // is still that parameter after it.
                let b = a.cfg.block_of[bci] as usize;
                stack = entry(&blocks[b].preds, &exits, b, depth);
            } else if stack.len() != depth {
                stack.clear();
                stack.resize(depth, Sym::Other);
            }
            let pop = |s: &mut Vec<Sym>| s.pop().unwrap_or(Sym::Other);
            // Pop an access's index and array; note it if it qualifies.
            let access =
                |s: &mut Vec<Sym>, bci: usize, out: &mut std::collections::BTreeMap<Bci, u32>| {
                    let idx = pop(s);
                    if let (Sym::WorkitemI32, Sym::Param(p)) = (idx, pop(s)) {
                        out.insert(bci as Bci, p);
                    }
                };
            match inst {
                Inst::Load { local } => {
                    let l = local.index();
                    stack.push(if l == 0 || wi64[l] {
                        Sym::Workitem
                    } else if wi32[l] {
                        Sym::WorkitemI32
                    } else if l < params && !assigned[l] && f.locals[l].ty.kind() == Kind::Ref {
                        Sym::Param(l as u32)
                    } else if let Some(p) = copies[l] {
                        Sym::Param(p)
                    } else {
                        Sym::Other
                    });
                }
                Inst::Store { local } => {
                    let s = pop(&mut stack);
                    let l = local.index();
                    if wi32[l] && s != Sym::WorkitemI32 {
                        wi32[l] = false;
                        changed = true;
                    }
                    if wi64[l] && s != Sym::Workitem {
                        wi64[l] = false;
                        changed = true;
                    }
                }
                Inst::Inc { local, .. } => {
                    let l = local.index();
                    if wi32[l] || wi64[l] {
                        (wi32[l], wi64[l]) = (false, false);
                        changed = true;
                    }
                }
                Inst::I64ToI32 => {
                    let s = pop(&mut stack);
                    stack.push(if s == Sym::Workitem {
                        Sym::WorkitemI32
                    } else {
                        Sym::Other
                    });
                }
                // Widened again, the narrowed number is the number (in a
                // proven chunk: inside `i32`).
                Inst::I32ToI64 => {
                    let s = pop(&mut stack);
                    stack.push(if s == Sym::WorkitemI32 {
                        Sym::Workitem
                    } else {
                        Sym::Other
                    });
                }
                _ if matches!(
                    inst.opcode().op(),
                    Op::Compare(Kind::I64, CmpOp::Eq | CmpOp::Ne)
                ) =>
                {
                    let (b, a) = (pop(&mut stack), pop(&mut stack));
                    if (a, b) == (Sym::Workitem, Sym::Workitem) {
                        let eq = matches!(inst.opcode().op(), Op::Compare(_, CmpOp::Eq));
                        tests.insert(bci as Bci, i32::from(eq));
                    }
                    stack.push(Sym::Other);
                }
                _ if shared_step(&mut stack, inst, Sym::Other, |s| access(s, bci, &mut out)) => {}
                _ => {
                    // Any other instruction pops its operands and pushes at
                    // most one result: keep what lies below its operands.
                    let after = frames
                        .get(bci + 1)
                        .and_then(|fr| fr.as_ref())
                        .map_or(0, |fr| fr.stack.len());
                    stack.truncate(kept_below(inst, depth, after));
                    stack.resize(after, Sym::Other);
                }
            }
            let b = a.cfg.block_of[bci] as usize;
            if blocks[b].end as usize == bci + 1 {
                exits[b] = Some(stack.clone());
            }
        }
        if !changed {
            return (out, tests);
        }
    }
}

/// The symbolic stack at the start of block `b` (of `depth` values): each
/// entry that every predecessor's exit agrees on, `Other` elsewhere; all
/// `Other` when a predecessor is not walked yet (a back edge) or left
/// another depth.
fn entry(preds: &[u32], exits: &[Option<Vec<Sym>>], b: usize, depth: usize) -> Vec<Sym> {
    let mut out: Option<Vec<Sym>> = None;
    for &p in preds {
        let p = p as usize;
        let known = if p < b { exits[p].as_ref() } else { None };
        match known {
            Some(e) if e.len() == depth => match &mut out {
                None => out = Some(e.clone()),
                Some(o) => {
                    for (x, y) in o.iter_mut().zip(e) {
                        if *x != *y {
                            *x = Sym::Other;
                        }
                    }
                }
            },
            _ => return vec![Sym::Other; depth],
        }
    }
    out.unwrap_or_else(|| vec![Sym::Other; depth])
}

/// Per local, the reference parameter it is a copy of: a non-parameter
/// reference local every store to which stores a parameter the kernel never
/// assigns, the same one each time, loaded by the instruction just before
/// in the same basic block.
pub(crate) fn param_copies(
    v: &offload_ir::Verified,
    k: FuncId,
    leaders: &std::collections::HashSet<Bci>,
) -> Vec<Option<u32>> {
    use offload_ir::{Inst, Kind};
    let f = v.func(k);
    let params = f.param_count as usize;
    let assigned = |l: usize| {
        f.body
            .iter()
            .any(|i| matches!(i, Inst::Store { local } if local.index() == l))
    };
    let mut out: Vec<Option<Option<u32>>> = vec![None; f.locals.len()];
    for (bci, inst) in f.body.iter().enumerate() {
        let Inst::Store { local } = *inst else {
            continue;
        };
        let l = local.index();
        if l < params || f.locals[l].ty.kind() != Kind::Ref {
            continue;
        }
        let from = match f.body.get(bci.wrapping_sub(1)) {
            Some(Inst::Load { local: p })
                if bci > 0
                    && !leaders.contains(&(bci as Bci))
                    && p.index() < params
                    && p.index() > 0
                    && f.locals[p.index()].ty.kind() == Kind::Ref
                    && !assigned(p.index()) =>
            {
                Some(p.index() as u32)
            }
            _ => None,
        };
        out[l] = match (out[l], from) {
            (None, Some(p)) => Some(Some(p)),
            (Some(Some(q)), Some(p)) if p == q => Some(Some(p)),
            _ => Some(None),
        };
    }
    out.into_iter().map(Option::flatten).collect()
}

#[cfg(test)]
mod tests {
    use super::workitem_indexed;
    use offload_ir::{Bci, parse_module, verify};
    use std::collections::BTreeMap;

    /// `workitem_indexed` of the first function of `src`.
    fn indexed(src: &str) -> BTreeMap<Bci, u32> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = offload_ir::FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        workitem_indexed(&v, k, &a)
    }

    #[test]
    fn saxpy_has_all_three_accesses_through_a_local() {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/kernels/saxpy.obc"
        ))
        .unwrap();
        // x[j] (param 2), y[j] loaded and stored (param 3).
        assert_eq!(indexed(&src), BTreeMap::from([(8, 2), (12, 3), (14, 3)]));
    }

    #[test]
    fn only_the_workitem_number_itself_and_fixed_arrays_count() {
        let k = |body: &str| {
            indexed(&format!(
                "kernel k(i: i64, a: i32[], b: i32[]) {{\n local j: i32\n{body}\n ret\n}}"
            ))
        };
        // Directly, with dup and swap in between.
        let direct = k("load a\n load i\n i64.to_i32\n dup\n pop\n i32.aload\n pop");
        assert_eq!(direct, BTreeMap::from([(5, 1)]));
        let swapped = k("load i\n i64.to_i32\n load a\n swap\n i32.aload\n pop");
        assert_eq!(swapped, BTreeMap::from([(4, 1)]));
        // Below a stored value that pops nothing (a constant) or pops only
        // values above it (an add, a call), the index and array are kept.
        let stored = k("load a\n load i\n i64.to_i32\n i32.const 7\n i32.astore");
        assert_eq!(stored, BTreeMap::from([(4, 1)]));
        let summed =
            k("load a\n load i\n i64.to_i32\n i32.const 7\n i32.const 8\n i32.add\n i32.astore");
        assert_eq!(summed, BTreeMap::from([(6, 1)]));
        // i + 1 is not i.
        assert!(
            k("load a\n load i\n i64.to_i32\n i32.const 1\n i32.add\n i32.aload\n pop").is_empty()
        );
        // A local that is also incremented, or also stored something else.
        assert!(
            k("load i\n i64.to_i32\n store j\n inc j 1\n load a\n load j\n i32.aload\n pop")
                .is_empty()
        );
        assert!(
            k("load i\n i64.to_i32\n store j\n i32.const 0\n store j\n load a\n load j\n i32.aload\n pop")
                .is_empty()
        );
        // An array parameter the kernel assigns.
        assert!(k("load b\n store a\n load a\n load i\n i64.to_i32\n i32.aload\n pop").is_empty());
        // A workitem number that is assigned.
        assert!(
            k("i64.const 3\n store i\n load a\n load i\n i64.to_i32\n i32.aload\n pop").is_empty()
        );
    }

    #[test]
    fn values_cross_a_block_boundary_where_every_predecessor_agrees() {
        // The array and index pushed before a branch whose two edges meet
        // at the access: both carry them.
        let agree = "kernel k(i: i64, a: i32[]) {
    load a
    load i
    i64.to_i32
    load i
    i64.const 0
    i64.lt
    br_if skip
  skip:
    i32.aload
    pop
    ret
}";
        assert_eq!(indexed(agree), BTreeMap::from([(7, 1)]));
        // One edge brings the workitem number, the other a constant.
        let disagree = "kernel k(i: i64, a: i32[]) {
    load a
    load i
    i64.const 0
    i64.lt
    br_if other
    load i
    i64.to_i32
    br join
  other:
    i32.const 0
  join:
    i32.aload
    pop
    ret
}";
        assert!(indexed(disagree).is_empty());
        // A loop's head: its back edge is not known when it is reached.
        let looped = "kernel k(i: i64, a: i32[]) {
    local n: i32
    i32.const 0
    store n
    load a
  head:
    dup
    load i
    i64.to_i32
    i32.aload
    pop
    inc n 1
    load n
    i32.const 3
    i32.lt
    br_if head
    pop
    ret
}";
        assert!(indexed(looped).is_empty());
    }

    #[test]
    fn an_i64_copy_of_the_workitem_number_narrowed_counts() {
        // The source language's `a[i]` with an `i64` index: copied, then
        // narrowed and tested before the access.
        let k = |body: &str| {
            indexed(&format!(
                "kernel k(i: i64, a: i32[]) {{\n local w: i64\n local n: i32\n{body}\n ret\n}}"
            ))
        };
        let copied = k(
            "load a\n load i\n store w\n load w\n i64.to_i32\n store n\n load n\n i32.to_i64\n load w\n i64.eq\n br_if ok\n throw IndexOutOfBounds\n ok:\n load n\n i32.aload\n pop",
        );
        assert_eq!(copied, BTreeMap::from([(13, 1)]));
        // A copy that is also assigned another value does not.
        let other = k(
            "load i\n store w\n i64.const 5\n store w\n load a\n load w\n i64.to_i32\n i32.aload\n pop",
        );
        assert!(other.is_empty());
    }
}
