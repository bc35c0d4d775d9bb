//! How much work one iteration of a loop is, in rough units of machine
//! instructions, so that a backend can poll for safepoints after a fixed
//! amount of work rather than a fixed number of back-edges: a short
//! arithmetic loop (mandelbrot's) then polls several times less often
//! than a long one with loads (nbody's), for the same time to a safepoint.
//!
//! The weights are coarse and deliberately high for what may stall: an
//! instruction is 1, a heap access (anything that dereferences, with its
//! null check) or an allocation [`MEMORY`], a division, remainder or unary
//! math function [`MATH`], and a direct call the weight of the callee's
//! body (one level; a call inside it, or a virtual call, counts
//! [`CALL`]). A loop's iteration is the instructions from its header to
//! its back-edge, inner loops counted once (they poll on their own).

use offload_ir::isa::{BinOp, Op, hz};
use offload_ir::{Bci, FuncId, Inst, Verified};

/// The weight of an instruction that touches the heap or allocates.
pub(crate) const MEMORY: u32 = 16;
/// The weight of a division, a remainder or a unary math function.
pub(crate) const MATH: u32 = 8;
/// The weight of a call whose callee is not counted.
pub(crate) const CALL: u32 = 32;

/// The weight of one iteration of the loop of `func` whose header is at
/// `header` and whose back-edge leaves `latch` (at least 1).
pub(crate) fn iteration(v: &Verified, func: FuncId, header: Bci, latch: Bci) -> u32 {
    let body = &v.func(func).body;
    let (lo, hi) = (header.min(latch) as usize, header.max(latch) as usize);
    let w = body
        .get(lo..=hi.min(body.len().saturating_sub(1)))
        .unwrap_or_default()
        .iter()
        .map(|i| inst(v, i, true))
        .fold(0u32, u32::saturating_add);
    w.max(1)
}

fn inst(v: &Verified, i: &Inst, follow_calls: bool) -> u32 {
    let op = i.opcode();
    match (i, op.op()) {
        (Inst::Call { func }, _) if follow_calls => v
            .func(*func)
            .body
            .iter()
            .map(|c| inst(v, c, false))
            .fold(0u32, u32::saturating_add)
            .max(1),
        _ if op.hazards().has(hz::CALLS) => CALL,
        _ if op.hazards().has(hz::NULL_CHECK) || op.hazards().has(hz::ALLOCATES) => MEMORY,
        (_, Op::Binary(_, BinOp::Div | BinOp::Rem)) => MATH,
        (_, Op::Unary(..)) => MATH,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weight_of(src: &str, kernel: &str) -> u32 {
        let v = offload_ir::parse_module("w.obc", src)
            .and_then(offload_ir::verify)
            .unwrap();
        let prog = offload_program::Program::new(std::sync::Arc::new(v), 0);
        let v = prog.verified();
        let k = v.func_named(kernel).unwrap();
        let a = prog.analysis(k).unwrap();
        let e = a.back_edges[0];
        iteration(v, k, e.to, e.from)
    }

    #[test]
    fn arithmetic_weighs_its_length_and_loads_weigh_more() {
        let counting = "kernel k(i: i64, n: i32, out: i32[]) {
    local j: i32
    i32.const 0
    store j
  top:
    load j
    i32.const 1
    i32.add
    store j
    load j
    load n
    i32.lt
    br_if top
    ret
}
";
        assert_eq!(weight_of(counting, "k"), 8);
        let loading = counting.replace(
            "    i32.const 1\n",
            "    load out\n    load j\n    i32.aload\n",
        );
        assert_eq!(weight_of(&loading, "k"), 8 + 2 + MEMORY - 1);
    }
}
