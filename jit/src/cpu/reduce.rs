//! A reducing kernel's values on the CPU (`offload_abi::reduce`): each
//! workitem's `ret` appends `(workitem, value)` to its slot's buffer
//! (`LaunchCtx::values`), whose fill count the slot keeps in a variable
//! and writes back at every exit; with the buffer full the slot leaves
//! with `exit::VALUES` between two workitems, and the host joins the values
//! into the combine tree and enters it again.
//!
//! Appending costs two stores and an add per workitem; the host's join, a
//! few operations per value, runs once per `VALUES_PER_SLOT` workitems on
//! the slot's own thread. Combining in registers instead would fix the
//! tree's shape into the code (the tree's nodes are aligned to the range's
//! start, which the code does not know), and gain little: the values stay
//! in L1 between the stores and the join.

use super::{CpuWalker, trusted};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Block, InstBuilder, Value, types};
use offload_abi::cpu::{VALUES_PER_SLOT, offsets};
use offload_abi::exit::VALUES as EXIT_VALUES;

impl CpuWalker<'_, '_> {
    /// Whether the kernel returns a value for a reduction.
    pub(super) fn reduces(&self) -> bool {
        self.v.func(self.cur.func).ret.is_some()
    }

    /// At the slot's entry, for a reducing kernel: its part of the values
    /// buffer, and the pairs already in it (the host empties it between
    /// entries, so 0 but for a host that did not).
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
            .imul_imm_s(slot, VALUES_PER_SLOT * 16);
        let base = self.backend.builder.ins().iadd(all, off);
        let at = self.slot_words();
        let n = self
            .backend
            .builder
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_VALUES);
        let var = self.var(types::I64);
        self.backend.builder.def_var(var, n);
        self.backend.env.values = Some((base, var));
    }

    /// The kernel's `ret` with value `v`: append `(w, v)` to the buffer.
    pub(crate) fn append_value(&mut self, v: Value) {
        let Some((base, var)) = self.backend.env.values else {
            return;
        };
        let kind = self
            .v
            .func(self.cur.func)
            .ret
            .expect("a reducing kernel")
            .kind();
        let raw = self.pack_raw(kind, v);
        let n = self.backend.builder.use_var(var);
        let off = self.backend.builder.ins().imul_imm_s(n, 16);
        let at = self.backend.builder.ins().iadd(base, off);
        let w = self
            .backend
            .builder
            .use_var(self.backend.env.w.expect("set"));
        self.backend.builder.ins().store(trusted(), w, at, 0);
        self.backend.builder.ins().store(trusted(), raw, at, 8);
        let n1 = self.backend.builder.ins().iadd_imm_s(n, 1);
        self.backend.builder.def_var(var, n1);
    }

    /// After a workitem (its `w` advanced): go on to `then`, or, with the
    /// buffer full, leave with the rest of the chunk unstarted.
    pub(super) fn values_full_exit(&mut self, then: Block) {
        let Some((_, var)) = self.backend.env.values else {
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

    /// At every exit: the buffer's fill count back to the slot's words.
    pub(super) fn values_write_back(&mut self) {
        if let Some((_, var)) = self.backend.env.values {
            let n = self.backend.builder.use_var(var);
            let at = self.slot_words();
            self.backend
                .builder
                .ins()
                .store(trusted(), n, at, offsets::SLOT_VALUES);
        }
    }
}
