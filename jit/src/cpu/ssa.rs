//! Redundant block parameters, removed before Cranelift compiles a kernel.
//!
//! The CPU backend lowers bytecode locals and stack slots through
//! cranelift-frontend `Variable`s and seals every block at the end
//! (`seal_all_blocks`), since a bytecode block's predecessors are only all
//! known once the whole kernel is lowered. Sealing late gives correct but
//! non-minimal SSA: a variable that a loop never changes still becomes a
//! parameter of the loop header whenever the back-edge's value is another
//! parameter (of a join inside the loop) that was not yet resolved when the
//! header was sealed. Cranelift's own `remove_constant_phis` pass only
//! removes a parameter whose one incoming value is an instruction's result,
//! not another parameter, so these survive, and each carries a register (or
//! a spill slot and moves on every back-edge) through the loop: the
//! workitem number, the chunk's end and the completed count in every loop
//! of every kernel.
//!
//! [`remove_redundant_params`] is the missing half of Braun et al.'s
//! trivial-phi removal: a parameter whose incoming values are all one value
//! `x` or the parameter itself is `x` (which then dominates the block: the
//! first arrival at the block on any path comes with `x`), repeated until
//! nothing changes.
//!
//! [`remat_constants`] runs after Cranelift's optimizer: it gives every
//! block that uses a constant a copy of its own. Cranelift means to do that
//! (its `remat` rules mark every `iconst`), yet in the optimized list
//! kernel (`offload::tools::bench::LIST_KERNEL`) the constants of one of the
//! unrolled copies of the body stayed hoisted above that copy's loop — an
//! object's header, a deopt exit's site word — and the register allocator
//! moved each between a register and a spill slot on every iteration. (A
//! constant the elaborator clones for a second place does not keep its
//! mark; a small function that shows the hoisting was not found, so
//! `tests/cpu_alloc.rs` checks the kernel itself.)

use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::{Block, BlockArg, Function, Inst, Opcode, Value};
use std::collections::HashMap;

/// Give every block that uses a constant (`iconst`, `f32const`,
/// `f64const`) defined in another block a copy of it, placed before the
/// block's first use; returns how many copies were made.
pub(crate) fn remat_constants(func: &mut Function) -> usize {
    let blocks: Vec<Block> = func.layout.blocks().collect();
    let mut made = 0;
    for block in blocks {
        let mut copies: HashMap<Value, Value> = HashMap::new();
        let insts: Vec<Inst> = func.layout.block_insts(block).collect();
        for inst in insts {
            let mut changed = false;
            let mut vals: Vec<Value> = func.dfg.inst_values(inst).collect();
            for v in &mut vals {
                let Some(def) = func.dfg.value_def(*v).inst() else {
                    continue;
                };
                let constant = matches!(
                    func.dfg.insts[def].opcode(),
                    Opcode::Iconst | Opcode::F32const | Opcode::F64const
                );
                if !constant || func.layout.inst_block(def) == Some(block) {
                    continue;
                }
                *v = *copies.entry(*v).or_insert_with(|| {
                    let copy = func.dfg.clone_inst(def);
                    func.layout.insert_inst(copy, inst);
                    made += 1;
                    func.dfg.first_result(copy)
                });
                changed = true;
            }
            if changed {
                func.dfg.overwrite_inst_values(inst, vals.into_iter());
            }
        }
    }
    made
}

/// Remove every block parameter that receives one value (other than
/// itself) on all incoming edges, making it an alias of that value.
/// Returns how many were removed.
pub(crate) fn remove_redundant_params(func: &mut Function) -> usize {
    let cfg = ControlFlowGraph::with_function(func);
    let entry = func.layout.entry_block();
    let blocks: Vec<Block> = func.layout.blocks().collect();
    let mut removed = 0;
    loop {
        let mut changed = false;
        for &block in &blocks {
            if Some(block) == entry {
                continue;
            }
            let mut preds: Vec<Inst> = cfg.pred_iter(block).map(|p| p.inst).collect();
            preds.sort_unstable();
            preds.dedup();
            let mut i = 0;
            while i < func.dfg.block_params(block).len() {
                let p = func.dfg.block_params(block)[i];
                match single_incoming(func, &preds, block, i, p) {
                    Some(x) => {
                        remove_arg(func, &preds, block, i);
                        func.dfg.remove_block_param(p);
                        func.dfg.change_to_alias(p, x);
                        removed += 1;
                        changed = true;
                    }
                    None => i += 1,
                }
            }
        }
        if !changed {
            return removed;
        }
    }
}

/// The one value other than `p` that every edge into `block` passes as its
/// `i`-th argument, if there is exactly one.
fn single_incoming(
    func: &Function,
    preds: &[Inst],
    block: Block,
    i: usize,
    p: Value,
) -> Option<Value> {
    let dfg = &func.dfg;
    let mut single = None;
    for &inst in preds {
        for bc in dfg.insts[inst].branch_destination(&dfg.jump_tables, &dfg.exception_tables) {
            if bc.block(&dfg.value_lists) != block {
                continue;
            }
            let BlockArg::Value(v) = bc.args(&dfg.value_lists).nth(i)? else {
                return None;
            };
            let v = dfg.resolve_aliases(v);
            if v == p {
                continue;
            }
            match single {
                None => single = Some(v),
                Some(s) if s == v => {}
                Some(_) => return None,
            }
        }
    }
    single
}

/// Drop the `i`-th argument of every edge into `block`.
fn remove_arg(func: &mut Function, preds: &[Inst], block: Block, i: usize) {
    let dfg = &mut func.dfg;
    for &inst in preds {
        for bc in
            dfg.insts[inst].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
        {
            if bc.block(&dfg.value_lists) == block {
                bc.remove(i, &mut dfg.value_lists);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{remat_constants, remove_redundant_params};
    use cranelift_codegen::ir::condcodes::IntCC;
    use cranelift_codegen::ir::{
        AbiParam, Function, InstBuilder, MemFlagsData, Opcode, Signature, types,
    };
    use cranelift_codegen::isa::CallConv;
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    /// Two nested loops, written with explicit block parameters: the outer
    /// loop counts `a` (a real parameter of its header), the inner loop
    /// counts `k` and passes `a` around itself unchanged through a parameter
    /// `p` of its header and `q` of a join inside it — what the frontend
    /// makes of the workitem number in a kernel's loop. Cranelift's
    /// `remove_constant_phis` keeps `p` and `q`: their one incoming value is
    /// itself a parameter.
    fn nested() -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        let mut f = Function::with_name_signature(Default::default(), sig);
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut f, &mut fctx);
        let [entry, outer, inner, left, join, latch, exit] = [(); 7].map(|()| b.create_block());
        b.append_block_params_for_function_params(entry);
        let a = b.append_block_param(outer, types::I64);
        let [p, k] = [(); 2].map(|()| b.append_block_param(inner, types::I64));
        let [q, k2] = [(); 2].map(|()| b.append_block_param(join, types::I64));
        let aq = b.append_block_param(latch, types::I64);
        b.switch_to_block(entry);
        let n = b.block_params(entry)[0];
        let zero = b.ins().iconst(types::I64, 0);
        b.ins().jump(outer, &[zero.into()]);
        b.switch_to_block(outer);
        let more = b.ins().icmp(IntCC::SignedLessThan, a, n);
        b.ins()
            .brif(more, inner, &[a.into(), zero.into()], exit, &[]);
        b.switch_to_block(inner);
        let go = b.ins().icmp(IntCC::SignedLessThan, k, p);
        b.ins().brif(go, left, &[], latch, &[p.into()]);
        b.switch_to_block(left);
        let odd = b.ins().band_imm_u(k, 1);
        let k1 = b.ins().iadd(k, odd);
        b.ins().brif(
            odd,
            join,
            &[p.into(), k1.into()],
            join,
            &[p.into(), k.into()],
        );
        b.switch_to_block(join);
        let k3 = b.ins().iadd_imm_s(k2, 1);
        let k3 = b.ins().iadd(k3, q);
        b.ins().jump(inner, &[q.into(), k3.into()]);
        b.switch_to_block(latch);
        let a1 = b.ins().iadd_imm_s(aq, 1);
        b.ins().jump(outer, &[a1.into()]);
        b.switch_to_block(exit);
        b.ins().return_(&[a]);
        b.seal_all_blocks();
        let module = crate::CpuJit::module(true).expect("a JIT module");
        b.finalize(cranelift_module::Module::target_config(&module));
        f
    }

    #[test]
    fn a_value_passed_around_a_loop_unchanged_loses_its_parameters() {
        let mut f = nested();
        let before = f.display().to_string();
        assert_eq!(remove_redundant_params(&mut f), 3, "{before}");
        // Left: the outer counter and the inner counter (header and join).
        let params: Vec<usize> = f
            .layout
            .blocks()
            .map(|b| f.dfg.block_params(b).len())
            .collect();
        assert_eq!(params, [1, 1, 1, 0, 1, 0, 0], "{}", f.display());
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        cranelift_codegen::verifier::verify_function(&f, &flags)
            .unwrap_or_else(|e| panic!("{e}\n{}", f.display()));
        // Cranelift's own pass would have kept them.
        let mut g = nested();
        let mut ctx = cranelift_codegen::Context::for_function(g.clone());
        ctx.compute_cfg();
        ctx.compute_domtree();
        let isa = cranelift_native::builder()
            .expect("host")
            .finish(flags)
            .expect("isa");
        ctx.remove_constant_phis(&*isa).expect("runs");
        g = ctx.func;
        let kept: usize = g.layout.blocks().map(|b| g.dfg.block_params(b).len()).sum();
        // (All seven, the entry's included.)
        assert_eq!(kept, 7, "{}", g.display());
    }

    /// A loop storing a 64-bit constant defined above it, as Cranelift's
    /// elaborator leaves one in the second copy of an unrolled kernel body
    /// (`tests/cpu_alloc.rs` checks a real kernel), and a second use of it
    /// in the exit.
    fn hoisted() -> Function {
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I64));
        sig.params.push(AbiParam::new(types::I64));
        sig.returns.push(AbiParam::new(types::I64));
        let mut f = Function::with_name_signature(Default::default(), sig);
        let mut fctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut f, &mut fctx);
        let [entry, h, body, exit] = [(); 4].map(|()| b.create_block());
        b.append_block_params_for_function_params(entry);
        let i = b.append_block_param(h, types::I64);
        b.switch_to_block(entry);
        let (p, n) = (b.block_params(entry)[0], b.block_params(entry)[1]);
        let zero = b.ins().iconst(types::I64, 0);
        let header = b.ins().iconst(types::I64, 0x18_0000_0000);
        b.ins().jump(h, &[zero.into()]);
        b.switch_to_block(h);
        let more = b.ins().icmp(IntCC::SignedLessThan, i, n);
        b.ins().brif(more, body, &[], exit, &[]);
        b.switch_to_block(body);
        let at = b.ins().ishl_imm_u(i, 3);
        let at = b.ins().iadd(p, at);
        b.ins().store(MemFlagsData::trusted(), header, at, 0);
        b.ins().store(MemFlagsData::trusted(), header, at, 8);
        let i1 = b.ins().iadd_imm_s(i, 1);
        b.ins().jump(h, &[i1.into()]);
        b.switch_to_block(exit);
        b.ins().return_(&[header]);
        b.seal_all_blocks();
        let module = crate::CpuJit::module(true).expect("a JIT module");
        b.finalize(cranelift_module::Module::target_config(&module));
        f
    }

    /// Uses of constants defined in another block.
    fn far_constant_uses(f: &Function) -> usize {
        f.layout
            .blocks()
            .flat_map(|blk| f.layout.block_insts(blk).map(move |i| (blk, i)))
            .flat_map(|(blk, i)| f.dfg.inst_values(i).map(move |v| (blk, v)))
            .filter(|&(blk, v)| {
                f.dfg.value_def(v).inst().is_some_and(|d| {
                    f.dfg.insts[d].opcode() == Opcode::Iconst && f.layout.inst_block(d) != Some(blk)
                })
            })
            .count()
    }

    #[test]
    fn a_constant_used_in_other_blocks_gets_a_copy_in_each() {
        let mut f = hoisted();
        // The body's two stores and the exit's return.
        assert_eq!(far_constant_uses(&f), 3, "{}", f.display());
        // One copy in the body (for both stores), one in the exit.
        assert_eq!(remat_constants(&mut f), 2, "{}", f.display());
        assert_eq!(far_constant_uses(&f), 0, "{}", f.display());
        let flags = cranelift_codegen::settings::Flags::new(cranelift_codegen::settings::builder());
        cranelift_codegen::verifier::verify_function(&f, &flags)
            .unwrap_or_else(|e| panic!("{e}\n{}", f.display()));
        // A second run has nothing left to do.
        assert_eq!(remat_constants(&mut f), 0);
    }
}
