//! When a load may reuse what an earlier load of the same element read: no
//! write of memory can run between them (the source language's `t[j]` read
//! three times, across the branches of inlined calls, is one load).
//!
//! The question is asked of two instructions of one function's bytecode,
//! `first` and `then`, loading the same element (the caller knows they
//! do: both index their array by the workitem number, `cpu::opt::indexed`).
//! The answer is yes when
//!
//! - neither lies inside a loop (a backend may lower a loop's instructions
//!   more than once: each lowering of `first` has its own result), and
//! - `first` dominates `then` (every path from the entry to `then` runs
//!   `first`), so its value is there whenever `then` runs, and
//! - no instruction on any path from `first` to `then` (not through
//!   `first` again) writes memory, or may wait for the host: a store, an
//!   atomic, an allocation, a call of a function that (transitively) does
//!   any of these or calls virtually, or a backward branch (whose poll may
//!   wait at a safepoint while host code writes the heap).

use offload_ir::{Bci, FuncId, Inst, Verified};
use std::collections::BTreeSet;

/// Whether the load at `then` may reuse the value the load at `first`
/// read (module docs).
pub(crate) fn reusable(v: &Verified, f: FuncId, first: Bci, then: Bci) -> bool {
    dominates(v, f, first, then) && quiet_between(v, f, first, then)
}

/// Whether `first` dominates `then`, neither in a loop (module docs).
fn dominates(v: &Verified, f: FuncId, first: Bci, then: Bci) -> bool {
    let body = &v.func(f).body;
    let n = body.len();
    let (a, b) = (first as usize, then as usize);
    if a == b || a >= n || b >= n {
        return false;
    }
    // Neither inside a loop: a loop's instructions may be lowered more than
    // once (a predicated loop's versions and unrolled copies), and each
    // lowering of `first` loads into a register of its own.
    let looped = |x: usize| {
        (0..n).any(|i| {
            body[i]
                .successors(i as Bci)
                .iter()
                .any(|&s| (s as usize) <= x && x <= i)
        })
    };
    if looped(a) || looped(b) {
        return false;
    }
    let succs = |i: usize| -> Vec<Bci> { body[i].successors(i as Bci).to_vec() };
    // Dominance: the entry cannot reach `then` around `first`.
    !(a != 0 && reaches(n, 0, b, a, succs))
}

/// Whether no instruction on a path from `first` to `then` writes memory
/// or waits (module docs).
fn quiet_between(v: &Verified, f: FuncId, first: Bci, then: Bci) -> bool {
    let body = &v.func(f).body;
    let n = body.len();
    let (a, b) = (first as usize, then as usize);
    let succs = |i: usize| -> Vec<Bci> { body[i].successors(i as Bci).to_vec() };
    // The instructions between: reachable from `first` without passing it
    // again, and reaching `then` without passing `first`.
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        for s in succs(i) {
            if let Some(p) = preds.get_mut(s as usize) {
                p.push(i);
            }
        }
    }
    let forward = walk(n, succs(a).iter().map(|&s| s as usize), a, b, |i| {
        succs(i).iter().map(|&s| s as usize).collect()
    });
    let backward = walk(n, preds[b].iter().copied(), a, b, |i| preds[i].clone());
    let mut pure_fns = BTreeSet::new();
    !forward.iter().any(|&i| {
        backward.contains(&i)
            && (writes(v, body[i], &mut pure_fns, &mut BTreeSet::new())
                || succs(i).iter().any(|&s| (s as usize) <= i))
    })
}

/// Whether the call at `then` may take the result of the call at `first`
/// (the caller knows both call one function): the function writes nothing
/// and does not loop (so it computes the same from the same arguments),
/// each call's arguments are the same locals and constants, loaded just
/// before it (no branch lands among those loads), no instruction between
/// assigns one of those locals, `first` dominates `then` outside loops,
/// and — if the function reads memory — nothing between writes it (the
/// module docs' rule for loads).
pub(crate) fn reusable_call(v: &Verified, f: FuncId, first: Bci, then: Bci) -> bool {
    let body = &v.func(f).body;
    let (Some(Inst::Call { func }), Some(Inst::Call { func: g })) =
        (body.get(first as usize), body.get(then as usize))
    else {
        return false;
    };
    if func != g
        || writes(
            v,
            Inst::Call { func: *func },
            &mut BTreeSet::new(),
            &mut BTreeSet::new(),
        )
    {
        return false;
    }
    let params = v.func(*func).param_count as usize;
    let (Some(a), Some(b)) = (
        call_args(body, first, params),
        call_args(body, then, params),
    ) else {
        return false;
    };
    // A function that reads no memory computes the same whatever was
    // written between.
    let reads = v.func(*func).body.iter().any(|i| {
        i.opcode().hazards().has(offload_ir::isa::hz::NULL_CHECK)
            || matches!(i, Inst::Call { .. } | Inst::CallVirt { .. })
    });
    if a != b || !dominates(v, f, first, then) || reads && !quiet_between(v, f, first, then) {
        return false;
    }
    // No local an argument reads is assigned between the calls.
    let read: BTreeSet<usize> = a
        .iter()
        .filter_map(|i| i.local_read())
        .map(|l| l.index())
        .collect();
    let (lo, hi) = (first as usize, then as usize);
    !(0..body.len()).any(|i| {
        body[i]
            .local_written()
            .is_some_and(|l| read.contains(&l.index()))
            && (lo < i && i < hi || reaches_between(body, first, then, i))
    })
}

/// Whether instruction `i` lies on a path from `first` to `then`.
fn reaches_between(body: &[Inst], first: Bci, then: Bci, i: usize) -> bool {
    let n = body.len();
    let succs = |x: usize| -> Vec<Bci> { body[x].successors(x as Bci).to_vec() };
    reaches(n, first as usize, i, usize::MAX, succs)
        && reaches(n, i, then as usize, first as usize, succs)
}

/// The `params` instructions that push a call's arguments, when each is a
/// `load` of a local or a constant and no branch lands among them.
fn call_args(body: &[Inst], call: Bci, params: usize) -> Option<Vec<Inst>> {
    let at = call as usize;
    let from = at.checked_sub(params)?;
    let args = body[from..at].to_vec();
    let plain = args.iter().all(|i| {
        matches!(
            i,
            Inst::Load { .. }
                | Inst::I32Const { .. }
                | Inst::I64Const { .. }
                | Inst::F32Const { .. }
                | Inst::F64Const { .. }
        )
    });
    let landed = body.iter().enumerate().any(|(b, i)| {
        i.successors(b as Bci)
            .iter()
            .any(|&s| s as usize > from && s as usize <= at && s as usize != b + 1)
    });
    (plain && !landed).then_some(args)
}

/// Whether `to` is reachable from `from` without passing `avoid`.
fn reaches(
    n: usize,
    from: usize,
    to: usize,
    avoid: usize,
    succs: impl Fn(usize) -> Vec<Bci>,
) -> bool {
    walk(n, [from], avoid, usize::MAX, |i| {
        succs(i).iter().map(|&s| s as usize).collect()
    })
    .contains(&to)
}

/// The instructions reachable from `start` along `next`, never entering
/// `avoid` and not going on past `stop`.
fn walk(
    n: usize,
    start: impl IntoIterator<Item = usize>,
    avoid: usize,
    stop: usize,
    next: impl Fn(usize) -> Vec<usize>,
) -> BTreeSet<usize> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<usize> = start.into_iter().collect();
    while let Some(i) = todo.pop() {
        if i == avoid || i >= n || !seen.insert(i) || i == stop {
            continue;
        }
        todo.extend(next(i));
    }
    seen
}

/// Whether `inst` may write memory or wait (module docs). `pure_fns`
/// caches the functions found not to; `visiting` breaks recursion (a
/// recursive call counts as writing).
fn writes(
    v: &Verified,
    inst: Inst,
    pure_fns: &mut BTreeSet<FuncId>,
    visiting: &mut BTreeSet<FuncId>,
) -> bool {
    use Inst::*;
    match inst {
        I32AStore
        | I64AStore
        | F32AStore
        | F64AStore
        | RefAStore
        | PutField { .. }
        | I32ArrayAtomicAdd
        | I64ArrayAtomicAdd
        | I32ArrayCmpxchg
        | I64ArrayCmpxchg
        | FieldAtomicAdd { .. }
        | FieldCmpxchg { .. }
        | New { .. }
        | NewArray { .. }
        | CallVirt { .. } => true,
        Call { func } => {
            if pure_fns.contains(&func) {
                return false;
            }
            if !visiting.insert(func) {
                return true;
            }
            let body = &v.func(func).body;
            let impure = body.iter().enumerate().any(|(i, &c)| {
                c.successors(i as Bci).iter().any(|&s| s as usize <= i)
                    || writes(v, c, pure_fns, visiting)
            });
            visiting.remove(&func);
            if !impure {
                pure_fns.insert(func);
            }
            impure
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified(src: &str) -> Verified {
        offload_ir::parse_module("r.obc", src)
            .and_then(offload_ir::verify)
            .unwrap()
    }

    const HEAD: &str = "kernel k(i: i64, a: f32[], out: f32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
";

    #[test]
    fn loads_across_branches_and_pure_calls_reuse_and_across_writes_do_not() {
        // 5: a[j]; a branch and a pure call; 15: a[j]; a store; 21: a[j].
        let src = format!(
            "func twice(x: f32) -> f32 {{
    load x
    load x
    f32.add
    ret
}}
{HEAD}    load a
    load j
    f32.aload
    call twice
    dup
    f32.const 0.0
    f32.lt
    br_if neg
    pop
    load a
    load j
    f32.aload
  neg:
    load out
    load j
    load a
    load j
    f32.aload
    f32.astore
    load a
    load j
    f32.aload
    pop
    pop
    ret
}}
"
        );
        let v = verified(&src);
        let k = v.func_named("k").unwrap();
        let loads: Vec<Bci> = v
            .func(k)
            .body
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i, Inst::F32ALoad))
            .map(|(b, _)| b as Bci)
            .collect();
        let [l0, l1, l2, l3] = loads[..] else {
            panic!("{loads:?}")
        };
        // l1 is in one arm only: it dominates nothing after the join.
        assert!(reusable(&v, k, l0, l1));
        assert!(!reusable(&v, k, l1, l2));
        assert!(reusable(&v, k, l0, l2));
        // The store to `out` (which may be `a`) lies between.
        assert!(!reusable(&v, k, l0, l3));
        assert!(!reusable(&v, k, l2, l3));
        // Not backwards.
        assert!(!reusable(&v, k, l2, l0));
    }

    #[test]
    fn a_loop_between_or_a_call_that_writes_forbids_reuse() {
        let looped = format!(
            "{HEAD}    load a
    load j
    f32.aload
    pop
  top:
    load j
    i32.const 1
    i32.sub
    store j
    load j
    i32.const 0
    i32.gt
    br_if top
    load a
    load j
    f32.aload
    pop
    ret
}}
"
        );
        let v = verified(&looped);
        let k = v.func_named("k").unwrap();
        assert!(!reusable(&v, k, 7, 20));
        let writing = format!(
            "func put(o: f32[]) {{
    load o
    i32.const 0
    f32.const 1.0
    f32.astore
    ret
}}
{HEAD}    load a
    load j
    f32.aload
    pop
    load out
    call put
    load a
    load j
    f32.aload
    pop
    ret
}}
"
        );
        let v = verified(&writing);
        let k = v.func_named("k").unwrap();
        assert!(!reusable(&v, k, 7, 13));
    }

    #[test]
    fn a_pure_call_with_the_same_locals_reuses_and_not_after_they_change() {
        // twice(x) at 7 and 10; x assigned at 13; twice(x) again at 15;
        // twice(y) at 18; first(a) (reads memory) at 21 and 26 with a
        // store between.
        let src = "func twice(x: f32) -> f32 {
    load x
    load x
    f32.add
    ret
}
func first(o: f32[]) -> f32 {
    load o
    i32.const 0
    f32.aload
    ret
}
kernel k(i: i64, a: f32[], y: f32) {
    local x: f32
    f32.const 2.0
    store x
    i32.const 0
    pop
    f32.const 0.0
    pop
    load x
    call twice
    pop
    load x
    call twice
    pop
    f32.const 3.0
    store x
    load x
    call twice
    pop
    load y
    call twice
    pop
    load a
    call first
    pop
    load a
    i32.const 0
    f32.const 1.0
    f32.astore
    load a
    call first
    pop
    ret
}
";
        let v = verified(src);
        let k = v.func_named("k").unwrap();
        let calls: Vec<Bci> = v
            .func(k)
            .body
            .iter()
            .enumerate()
            .filter(|(_, i)| matches!(i, Inst::Call { .. }))
            .map(|(b, _)| b as Bci)
            .collect();
        let [c0, c1, c2, c3, f0, f1] = calls[..] else {
            panic!("{calls:?}")
        };
        assert!(reusable_call(&v, k, c0, c1));
        // `x` was assigned between.
        assert!(!reusable_call(&v, k, c1, c2));
        assert!(!reusable_call(&v, k, c0, c2));
        // Another argument.
        assert!(!reusable_call(&v, k, c2, c3));
        // Another function.
        assert!(!reusable_call(&v, k, c3, f0));
        // A function that reads memory, a store between.
        assert!(!reusable_call(&v, k, f0, f1));
    }
}
