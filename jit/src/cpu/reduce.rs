//! A reducing kernel's values on the CPU (`offload_abi::reduce`): each
//! workitem's `ret` appends its value to its slot's buffer
//! (`LaunchCtx::values`), which holds the values of consecutive workitems;
//! the slot keeps the fill count and the run's first workitem in variables
//! and writes them back at every exit. With the buffer full, or a claim
//! that does not continue the run, the slot leaves with `exit::VALUES`
//! between two workitems, and the host joins the run into the combine tree
//! and enters it again.
//!
//! Appending costs a store (of the value's own size) and an add per
//! workitem (the run's first workitem is set where the slot starts and at
//! its claims);
//! the host's join, about one combine per value, runs once per
//! `VALUES_PER_SLOT` workitems on the slot's own thread. (Appending
//! `(workitem, value)` pairs instead cost a second store and a pass over
//! the pairs to find the runs.) Combining in registers would fix the
//! tree's shape into the code (its nodes are aligned to the range's start,
//! which the code does not know): the next step.

use super::{CpuWalker, trusted};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Block, InstBuilder, Value, types};
use offload_abi::cpu::{VALUES_PER_SLOT, offsets};
use offload_abi::exit::VALUES as EXIT_VALUES;
use offload_ir::Kind;

impl CpuWalker<'_, '_> {
    /// Whether the kernel returns a value for a reduction.
    pub(super) fn reduces(&self) -> bool {
        self.v.func(self.cur.func).ret.is_some()
    }

    /// At the slot's entry, for a reducing kernel: its part of the values
    /// buffer, the values already in it (the host empties it between
    /// entries, so 0 but for a host that did not) and the run's first
    /// workitem.
    pub(super) fn values_setup(&mut self) {
        if !self.reduces() {
            return;
        }
        let (ctx, slot, _) = self.base_values();
        let all = self.backend.builder.ins().load(
            self.backend.ptr,
            super::invariant(),
            ctx,
            offsets::VALUES,
        );
        let off = self
            .backend
            .builder
            .ins()
            .imul_imm_s(slot, VALUES_PER_SLOT * 8);
        let base = self.backend.builder.ins().iadd(all, off);
        let at = self.slot_words();
        let n = self
            .backend
            .builder
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_VALUES);
        let first =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), at, offsets::SLOT_VALUES_FIRST);
        let var = self.var(types::I64);
        self.backend.builder.def_var(var, n);
        let fv = self.var(types::I64);
        self.backend.builder.def_var(fv, first);
        self.backend.env.values = Some((base, var, fv));
    }

    /// The kernel's `ret` with value `v`: append it to the buffer.
    pub(crate) fn append_value(&mut self, v: Value) {
        let Some((base, var, _)) = self.backend.env.values else {
            return;
        };
        let kind = self
            .v
            .func(self.cur.func)
            .ret
            .expect("a reducing kernel")
            .kind();
        // In its own size: 4 bytes for an `i32` or `f32`.
        let size = match kind {
            Kind::I32 | Kind::F32 => 4,
            _ => 8,
        };
        let n = self.backend.builder.use_var(var);
        let off = self.backend.builder.ins().imul_imm_s(n, size);
        let at = self.backend.builder.ins().iadd(base, off);
        self.backend.builder.ins().store(trusted(), v, at, 0);
        let n1 = self.backend.builder.ins().iadd_imm_s(n, 1);
        self.backend.builder.def_var(var, n1);
    }

    /// Where the slot starts its workitems at `w` (its entry, a resumed
    /// record's workitem): the buffer is empty there (the host empties it
    /// between entries), so its run starts at `w`.
    pub(super) fn values_start_at(&mut self, w: Value) {
        if let Some((_, _, fv)) = self.backend.env.values {
            self.backend.builder.def_var(fv, w);
        }
    }

    /// After a claim of `[lo, hi)`: go on to `then`, or, when the buffer
    /// holds a run that `lo` does not continue, leave with the chunk
    /// unstarted (the host takes the run first).
    pub(super) fn values_claim_exit(&mut self, lo: Value, hi: Value, then: Block) {
        let Some((_, var, fv)) = self.backend.env.values else {
            self.backend.builder.ins().jump(then, &[]);
            return;
        };
        let n = self.backend.builder.use_var(var);
        let first = self.backend.builder.use_var(fv);
        let next = self.backend.builder.ins().iadd(first, n);
        let apart = self.backend.builder.ins().icmp(IntCC::NotEqual, lo, next);
        let some = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThan, n, 0);
        let leave_now = self.backend.builder.ins().band(apart, some);
        // An empty buffer's run starts at the claim.
        let first = self.backend.builder.ins().select(some, first, lo);
        self.backend.builder.def_var(fv, first);
        let leave = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(leave);
        self.backend
            .builder
            .ins()
            .brif(leave_now, leave, &[], then, &[]);
        self.backend.builder.switch_to_block(leave);
        self.slot_exit(lo, hi, EXIT_VALUES);
    }

    /// After a workitem (its `w` advanced): go on to `then`, or, with the
    /// buffer full, leave with the rest of the chunk unstarted.
    pub(super) fn values_full_exit(&mut self, then: Block) {
        let Some((_, var, _)) = self.backend.env.values else {
            self.backend.builder.ins().jump(then, &[]);
            return;
        };
        let n = self.backend.builder.use_var(var);
        let full = self.backend.builder.ins().icmp_imm_s(
            IntCC::SignedGreaterThanOrEqual,
            n,
            VALUES_PER_SLOT,
        );
        let leave = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(leave);
        self.backend.builder.ins().brif(full, leave, &[], then, &[]);
        self.backend.builder.switch_to_block(leave);
        let w = self
            .backend
            .builder
            .use_var(self.backend.env.w.expect("set"));
        let hi = self
            .backend
            .builder
            .use_var(self.backend.env.hi.expect("set"));
        self.slot_exit(w, hi, EXIT_VALUES);
    }

    /// At every exit: the buffer's fill count and first workitem back to
    /// the slot's words.
    pub(super) fn values_write_back(&mut self) {
        if let Some((_, var, fv)) = self.backend.env.values {
            let n = self.backend.builder.use_var(var);
            let first = self.backend.builder.use_var(fv);
            let at = self.slot_words();
            self.backend
                .builder
                .ins()
                .store(trusted(), n, at, offsets::SLOT_VALUES);
            self.backend
                .builder
                .ins()
                .store(trusted(), first, at, offsets::SLOT_VALUES_FIRST);
        }
    }
}
