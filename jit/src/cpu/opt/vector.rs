//! Unrolled and SIMD item loops ([`unroll_factor`], [`vectorizable`]).

use offload_ir::isa::{BinOp, Op};
use offload_ir::{Bci, FuncId, Inst, Kind};

/// The most bytecode instructions a kernel may have for its unchecked item
/// loop to be unrolled.
pub(crate) const UNROLL_MAX_INSTS: usize = 64;

/// How many workitems the unchecked version of kernel `k`'s item loop runs
/// per control-word check: [`UNROLL`] for a small kernel (at most
/// [`UNROLL_MAX_INSTS`] instructions) with no loop and no call, else 1.
///
/// For such a kernel the per-workitem work of the loop (the chunk-end
/// compare, the control-word load and test, the branch back) is as large as
/// the body itself (saxpy's body is six machine instructions); with the
/// body repeated `UNROLL` times between checks, that work is paid once per
/// group. The control word is still read before every group, so a
/// safepoint or another slot's deopt waits for at most `UNROLL - 1` more
/// straight-line workitems. Kernels with loops gain nothing (the body
/// dominates) and calls would be inlined `UNROLL` more times.
pub(crate) fn unroll_factor(v: &offload_ir::Verified, k: FuncId) -> u32 {
    use offload_ir::isa::hz;
    let f = v.func(k);
    let small = f.body.len() <= UNROLL_MAX_INSTS;
    let straight = f.body.iter().enumerate().all(|(bci, inst)| {
        inst.target().is_none_or(|t| t as usize > bci) && !inst.opcode().hazards().has(hz::CALLS)
    });
    if small && straight { UNROLL } else { 1 }
}

/// The lane-wise operation `inst` is in a SIMD body, by the instruction
/// table's class: `add`, `sub`, `mul` and `div` of `f32`, and `add`, `sub`,
/// `and`, `or` and `xor` of `i32` — operations a vector unit computes a
/// lane at a time with the scalar's exact bits. Everything else keeps the
/// kernel on the scalar body.
pub(crate) fn simd_op(inst: Inst) -> Option<(Kind, BinOp)> {
    match inst.opcode().op() {
        Op::Binary(k @ Kind::F32, op @ (BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div))
        | Op::Binary(
            k @ Kind::I32,
            op @ (BinOp::Add | BinOp::Sub | BinOp::And | BinOp::Or | BinOp::Xor),
        ) => Some((k, op)),
        _ => None,
    }
}

/// Whether the unchecked item loop of kernel `k` can run a group of
/// [`UNROLL`] workitems as one SIMD body, a lane per workitem (a GPU warp on
/// a CPU vector unit): the body is one basic block ending in `ret`, its
/// values are `i32` or `f32`, its arithmetic is `add`, `sub`, `mul`, `div`
/// (`f32`) or `add`, `sub`, `and`, `or`, `xor` (`i32`), and every array
/// access is one of `unchecked` (indexed by the workitem number, proven in
/// bounds for the chunk) into a reference parameter. Such a body has no
/// deopt site left, and workitem `w` touches only element `w` of any array,
/// so running the lanes in lockstep is the same as running the workitems
/// one after another. The walk is [`super::lanes::walk`], the one every SIMD
/// body's lowering takes.
pub(crate) fn vectorizable(
    v: &offload_ir::Verified,
    k: FuncId,
    unchecked: &std::collections::BTreeSet<Bci>,
    known: &std::collections::BTreeMap<Bci, i32>,
) -> bool {
    super::lanes::walk(v.func(k), Some(unchecked), known, &mut super::lanes::Check).is_ok()
}

/// SIMD bodies per control-word check when the item loop is vectorized
/// ([`vectorizable`]): a group is `UNROLL * VECTORS_PER_GROUP` workitems.
/// Eight rather than four: saxpy over 2^20 elements 0.956x by turns (the
/// loop's compare, branch and poll spread over twice the work).
pub(crate) const VECTORS_PER_GROUP: u32 = 8;

/// Workitems per control-word check in an unrolled item loop.
pub(crate) const UNROLL: u32 = 4;

#[cfg(test)]
mod tests {
    use super::{UNROLL, UNROLL_MAX_INSTS, unroll_factor};
    use crate::cpu::opt::test_support::example;
    use crate::cpu::opt::workitem_indexed;
    use offload_ir::{parse_module, verify};

    /// `vectorizable` of the first function of `src`, with its
    /// workitem-indexed accesses unchecked.
    fn vector(src: &str) -> bool {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = offload_ir::FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        let unchecked = workitem_indexed(&v, k, &a).into_keys().collect();
        super::vectorizable(&v, k, &unchecked, &Default::default())
    }

    #[test]
    fn straight_32_bit_kernels_over_their_own_elements_vectorize() {
        assert!(vector(&example("saxpy.obc")));

        let k = |body: &str| {
            vector(&format!(
                "kernel k(i: i64, a: f32, x: f32[], y: f32[], p: i32[], d: f64[]) {{\n local j: i32\n load i\n i64.to_i32\n store j\n{body}\n ret\n}}"
            ))
        };
        assert!(k(
            "load p\n load j\n load p\n load j\n i32.aload\n i32.const 3\n i32.xor\n i32.astore"
        ));
        assert!(
            k("load y\n load j\n load a\n f32.astore"),
            "a uniform value stored"
        );
        // An index other than the workitem's own, a 64-bit value, an integer
        // multiply, a branch, a call-free but unsupported instruction.
        assert!(!k("load y\n i32.const 0\n load a\n f32.astore"));
        assert!(!k("load d\n load j\n f64.const 1.0\n f64.astore"));
        assert!(!k(
            "load p\n load j\n load p\n load j\n i32.aload\n i32.const 3\n i32.mul\n i32.astore"
        ));
        assert!(!k(
            "load j\n br_if out\n load y\n load j\n load a\n f32.astore\n out:"
        ));
        assert!(!k(
            "load y\n load j\n load x\n load j\n f32.aload\n f32.sqrt\n f32.astore"
        ));
    }

    #[test]
    fn an_i64_index_tested_after_its_narrowing_vectorizes() {
        // The source language's `y[i] = a * x[i]` with `i: i64`: each
        // access behind `narrow as i64 == wide`, a branch around a throw,
        // which the proven chunk decides.
        let src = "kernel k(i: i64, a: f32, x: f32[], y: f32[]) {
 local w: i64
 local n: i32
 load i
 store w
 load w
 i64.to_i32
 store n
 load n
 i32.to_i64
 load w
 i64.eq
 br_if ok
 throw IndexOutOfBounds
ok:
 load y
 load n
 load a
 load x
 load n
 f32.aload
 f32.mul
 f32.astore
 ret
}";
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = offload_ir::FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        let unchecked = workitem_indexed(&v, k, &a).into_keys().collect();
        let known = crate::cpu::opt::workitem_tests(&v, k, &a);
        assert_eq!(known, std::collections::BTreeMap::from([(8, 1)]));
        assert!(super::vectorizable(&v, k, &unchecked, &known));
        // Without what the chunk proves, the branch keeps it scalar.
        assert!(!super::vectorizable(&v, k, &unchecked, &Default::default()));
    }

    /// `unroll_factor` of the first function of `src`.
    fn unroll(src: &str) -> u32 {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        unroll_factor(&v, offload_ir::FuncId::new(0))
    }

    #[test]
    fn small_straight_kernels_unroll_and_loops_calls_and_big_bodies_do_not() {
        let saxpy = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/kernels/saxpy.obc"
        ))
        .unwrap();
        assert_eq!(unroll(&saxpy), UNROLL);
        // A forward branch is fine.
        let fwd = "kernel k(i: i64, a: i32[]) {\n load i\n i64.const 3\n i64.lt\n br_if out\n load a\n i32.const 0\n i32.const 1\n i32.astore\n out:\n ret\n}";
        assert_eq!(unroll(fwd), UNROLL);
        let looped = "kernel k(i: i64, a: i32[]) {\n local k: i32\n i32.const 0\n store k\n top:\n inc k 1\n load k\n i32.const 9\n i32.lt\n br_if top\n ret\n}";
        assert_eq!(unroll(looped), 1);
        let called = "func f(x: i32) -> i32 {\n load x\n ret\n}\nkernel k(i: i64, a: i32[]) {\n i32.const 1\n call f\n pop\n ret\n}";
        let v = verify(parse_module("t.obc", called).unwrap()).unwrap();
        let k = (0..2)
            .map(offload_ir::FuncId::new)
            .find(|&f| v.func(f).name == "k")
            .unwrap();
        assert_eq!(unroll_factor(&v, k), 1);
        let big = format!(
            "kernel k(i: i64, a: i32[]) {{\n{}\n ret\n}}",
            "i32.const 1\n pop\n".repeat(UNROLL_MAX_INSTS / 2)
        );
        assert_eq!(unroll(&big), 1);
    }
}
