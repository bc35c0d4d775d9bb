//! Calls in lockstep groups ([`super::lockstep`]): a call of a *lane
//! function* runs inside the group, its body inlined on vectors, a lane
//! per workitem, with its branches turned into selects (`cpu/lane_call.rs`).
//!
//! A lane function computes a value from values and nothing else: its
//! parameters, locals and result are `i32` or `f32`; every branch goes
//! forward (no loop, so every path is finite and the body can run on every
//! lane whichever way each goes); its operand stack has the same kinds on
//! every edge into a block (a value-producing `if` leaves its value there)
//! and only the result at a `ret`; and every instruction is one that cannot
//! deopt, throw, allocate, touch the heap or call out — lane-wise `add`,
//! `sub`, `mul`, `div` of `f32`, `add`, `sub`, `mul`, `and`, `or`, `xor`
//! of `i32`, `sqrt`, `neg`, `abs`, `exp` and `log` of `f32`, comparisons
//! of either, conversions between them (rounding to nearest, and
//! saturating with NaN to 0, in a vector as in a register), constants,
//! locals and the stack shuffles. Running both sides
//! of a branch is then invisible: each lane keeps what its own path
//! computed, bit for bit what the scalar code computes for that workitem.

use offload_ir::isa::{BinOp, Op, UnOp};
use offload_ir::{Bci, FuncId, Inst, Kind, Verified};
use std::collections::{BTreeSet, HashMap};

/// The lane-wise binary operations of lockstep groups and of lane
/// functions: those a vector unit computes a lane at a time with the
/// scalar's exact bits.
pub(crate) fn lane_binary(k: Kind, op: BinOp) -> bool {
    match k {
        Kind::F32 => matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div),
        Kind::I32 => matches!(
            op,
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::And | BinOp::Or | BinOp::Xor
        ),
        _ => false,
    }
}

/// The lane-wise unary operations of `f32` in lockstep groups and lane
/// functions (`exp` and `log` as libm's steps on vectors,
/// `cpu/lane_call.rs`).
pub(crate) fn lane_unary(op: UnOp) -> bool {
    matches!(
        op,
        UnOp::Sqrt | UnOp::Neg | UnOp::Abs | UnOp::Exp | UnOp::Log
    )
}

/// The first instruction of each basic block of a lane function.
pub(crate) fn leaders(body: &[Inst]) -> BTreeSet<Bci> {
    let mut leaders = BTreeSet::from([0 as Bci]);
    for (bci, inst) in body.iter().enumerate() {
        if let Some(t) = inst.target() {
            leaders.insert(t);
            leaders.insert(bci as Bci + 1);
        }
        if matches!(inst, Inst::Ret) {
            leaders.insert(bci as Bci + 1);
        }
    }
    leaders.retain(|&b| (b as usize) < body.len());
    leaders
}

/// Whether function `func` is a lane function (module docs).
pub(crate) fn lane_function(v: &Verified, func: FuncId) -> bool {
    let f = v.func(func);
    let lane = |k: Kind| matches!(k, Kind::I32 | Kind::F32);
    if f.body.is_empty()
        || !f.ret.is_some_and(|t| lane(t.kind()))
        || !f.locals.iter().all(|l| lane(l.ty.kind()))
    {
        return false;
    }
    if f.body
        .iter()
        .enumerate()
        .any(|(bci, i)| i.target().is_some_and(|t| t as usize <= bci))
    {
        return false;
    }
    let kinds: Vec<Kind> = f.locals.iter().map(|l| l.ty.kind()).collect();
    let ret = f.ret.map(|t| t.kind());
    let starts: Vec<usize> = leaders(&f.body).iter().map(|&b| b as usize).collect();
    // The stack's kinds on the edges into each block (forward edges only:
    // a block's are all known when it is reached in order).
    let mut entry: HashMap<usize, Vec<Kind>> = HashMap::from([(0, Vec::new())]);
    let edge =
        |at: usize, stack: &[Kind], entry: &mut HashMap<usize, Vec<Kind>>| match entry.get(&at) {
            Some(k) => k.as_slice() == stack,
            None => {
                entry.insert(at, stack.to_vec());
                true
            }
        };
    for (i, &s) in starts.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(f.body.len());
        // A block no edge reaches never runs.
        let Some(mut stack) = entry.get(&s).cloned() else {
            continue;
        };
        let mut open = true;
        for &inst in &f.body[s..end] {
            if !step(&mut stack, &kinds, ret, inst) {
                return false;
            }
            let ok = match inst {
                Inst::Br { target } => {
                    open = false;
                    edge(target.0 as usize, &stack, &mut entry)
                }
                Inst::BrIf { target } | Inst::BrUnless { target } => {
                    edge(target.0 as usize, &stack, &mut entry)
                }
                Inst::Ret => {
                    open = false;
                    true
                }
                _ => true,
            };
            if !ok {
                return false;
            }
        }
        if open && !edge(end, &stack, &mut entry) {
            return false;
        }
    }
    true
}

/// One instruction of a lane function's check, on the kinds of its stack.
fn step(stack: &mut Vec<Kind>, kinds: &[Kind], ret: Option<Kind>, inst: Inst) -> bool {
    let pop = |k: Kind, stack: &mut Vec<Kind>| stack.pop() == Some(k);
    match inst {
        Inst::Load { local } => stack.push(kinds[local.index()]),
        Inst::Store { local } => return pop(kinds[local.index()], stack),
        Inst::Inc { local, .. } => return kinds[local.index()] == Kind::I32,
        Inst::I32Const { .. } => stack.push(Kind::I32),
        Inst::F32Const { .. } => stack.push(Kind::F32),
        Inst::Dup | Inst::Pop | Inst::Swap => return super::shuffle(stack, inst) == Some(true),
        Inst::Br { .. } => {}
        Inst::BrIf { .. } | Inst::BrUnless { .. } => return pop(Kind::I32, stack),
        Inst::Ret => return ret.is_some_and(|k| pop(k, stack)) && stack.is_empty(),
        _ => match inst.opcode().op() {
            Op::Binary(k, op) if lane_binary(k, op) => {
                if !(pop(k, stack) && pop(k, stack)) {
                    return false;
                }
                stack.push(k);
            }
            Op::Unary(Kind::F32, op) if lane_unary(op) => {
                if !pop(Kind::F32, stack) {
                    return false;
                }
                stack.push(Kind::F32);
            }
            Op::Compare(k @ (Kind::I32 | Kind::F32), _) => {
                if !(pop(k, stack) && pop(k, stack)) {
                    return false;
                }
                stack.push(Kind::I32);
            }
            Op::Convert(from @ (Kind::I32 | Kind::F32), to @ (Kind::I32 | Kind::F32))
                if from != to =>
            {
                if !pop(from, stack) {
                    return false;
                }
                stack.push(to);
            }
            _ => return false,
        },
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use offload_ir::{parse_module, verify};

    /// Whether the second function of `src` (after a kernel) is a lane
    /// function.
    fn callee(src: &str) -> bool {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let f = FuncId::new(1);
        assert_eq!(v.func(f).name, "f");
        lane_function(&v, f)
    }

    const HEAD: &str = "kernel k(i: i64) {\n ret\n}\n";

    #[test]
    fn branches_that_join_at_returns_are_a_lane_function() {
        let src = format!(
            "{HEAD}func f(d: f32) -> f32 {{\n local w: f32\n load d\n f32.exp\n store w\n load d\n f32.const 0.0\n f32.lt\n br_unless pos\n f32.const 1.0\n load w\n f32.sub\n ret\n pos:\n load w\n ret\n}}\n"
        );
        assert!(callee(&src));
    }

    #[test]
    fn a_value_left_on_the_stack_at_a_join_is_a_lane_function() {
        // `if d < 0.0 { 1.0 - w } else { w }` as the source compiler
        // writes it: each arm leaves its value, the join returns it.
        let src = format!(
            "{HEAD}func f(d: f32) -> f32 {{\n local w: f32\n load d\n f32.exp\n store w\n load d\n f32.const 0.0\n f32.lt\n br_unless other\n f32.const 1.0\n load w\n f32.sub\n br join\n other:\n load w\n join:\n ret\n}}\n"
        );
        assert!(callee(&src));
    }

    #[test]
    fn loops_calls_heap_accesses_and_other_kinds_are_not() {
        let looped = format!(
            "{HEAD}func f(n: i32) -> i32 {{\n top:\n load n\n br_if top\n load n\n ret\n}}\n"
        );
        assert!(!callee(&looped));
        let heap = format!(
            "{HEAD}func f(a: f32[], j: i32) -> f32 {{\n load a\n load j\n f32.aload\n ret\n}}\n"
        );
        assert!(!callee(&heap));
        let wide = format!("{HEAD}func f(x: f64) -> f64 {{\n load x\n ret\n}}\n");
        assert!(!callee(&wide));
        let div =
            format!("{HEAD}func f(x: i32) -> i32 {{\n load x\n i32.const 3\n i32.div\n ret\n}}\n");
        assert!(!callee(&div), "an i32 division may throw");
        let sin = format!("{HEAD}func f(x: f32) -> f32 {{\n load x\n f32.sin\n ret\n}}\n");
        assert!(!callee(&sin), "no lane-wise sin");
        let nothing = format!("{HEAD}func f(x: f32) {{\n ret\n}}\n");
        assert!(!callee(&nothing), "no result");
    }
}
