//! CPU deopt exits: writing a save record from the exit's variables, exits
//! shared by the checks of one instruction, and array checks.

use super::{CpuWalker, trusted};
use crate::lower::Exit;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Block, InstBuilder, Value, types};
use cranelift_frontend::{FunctionBuilder, Variable};
use offload_abi::cpu::offsets;
use offload_abi::exit::DEOPT as EXIT_DEOPT;
use offload_abi::record;
use offload_deopt::{Reason, SaveLayout};
use offload_ir::Bci;

/// The save-record formula (`offload_abi::record`) in Cranelift IR.
impl record::Arith for CpuWalker<'_, '_> {
    type V = Value;
    fn mul(&mut self, a: Value, b: Value) -> Value {
        self.backend.builder.ins().imul(a, b)
    }
    fn mul_add(&mut self, a: Value, b: Value, c: impl FnOnce(&mut Self) -> Value) -> Value {
        let p = self.backend.builder.ins().imul(a, b);
        let c = c(self);
        self.backend.builder.ins().iadd(p, c)
    }
    fn mul_imm_add(&mut self, a: Value, k: i64, c: Value) -> Value {
        let p = self.backend.builder.ins().imul_imm_s(a, k);
        self.backend.builder.ins().iadd(c, p)
    }
}

impl CpuWalker<'_, '_> {
    /// A deopt exit through `exit` here: its record's site word is a
    /// constant.
    pub(super) fn deopt_at(&mut self, exit: Exit<Variable>) {
        let sw = self.backend.builder.ins().iconst(
            types::I64,
            SaveLayout::site_word(exit.site, exit.reason) as i64,
        );
        self.deopt_exit(&exit, sw);
    }

    /// The body of deopt exit `exit` in the current block: write the
    /// record with site word `sw` (which names the site and the reason),
    /// then go on (or stop, for a safepoint).
    pub(super) fn deopt_exit(&mut self, exit: &Exit<Variable>, sw: Value) {
        // Deopt exits are laid out after the hot code, so that the checks
        // guarding them fall through.
        if let Some(b) = self.backend.builder.current_block() {
            self.backend.builder.set_cold_block(b);
        }
        let rec = self.record_address();
        let w = self
            .backend
            .builder
            .use_var(self.backend.env.w.expect("set"));
        self.backend
            .builder
            .ins()
            .store(trusted(), w, rec, (SaveLayout::WORKITEM_WORD * 8) as i32);
        // Every frame's values, outermost first.
        for s in &exit.slots {
            let val = self.backend.builder.use_var(s.var);
            let raw = self.pack_raw(s.kind, val);
            self.backend
                .builder
                .ins()
                .store(trusted(), raw, rec, (s.word * 8) as i32);
        }
        // The site word marks the record as written. Only this slot's own
        // worker reads the record, after the slot function has returned, so
        // a plain store suffices (an atomic one costs a full fence on x86).
        self.backend
            .builder
            .ins()
            .store(trusted(), sw, rec, (SaveLayout::SITE_WORD * 8) as i32);
        if exit.reason == Reason::Safepoint {
            // Everything stops at a safepoint: this slot's unstarted rest
            // runs when the slot is entered again.
            self.count_record();
            let w1 = self.backend.builder.ins().iadd_imm_s(w, 1);
            let hi = self
                .backend
                .builder
                .use_var(self.backend.env.hi.expect("set"));
            self.slot_exit(w1, hi, EXIT_DEOPT);
        } else {
            let next = self.backend.env.after_deopt.expect("set");
            self.backend.builder.ins().jump(next, &[]);
        }
    }

    /// The address of this slot's record just past its count: where its
    /// next deopt writes, and the one the host asks it to resume.
    pub(super) fn record_address(&mut self) -> Value {
        let (ctx, slot, _) = self.base_values();
        let area =
            self.backend
                .builder
                .ins()
                .load(self.backend.ptr, trusted(), ctx, offsets::SAVE_AREA);
        let words =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), ctx, offsets::RECORD_WORDS);
        let per =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), ctx, offsets::RECORDS_PER_SLOT);
        let index = record::index(self, slot, per, Self::records_count);
        record::address(self, area, words, index)
    }

    /// Branch to deopt exit `exit` if `cond` is non-zero; continue
    /// otherwise.
    ///
    /// The checks of one instruction (a null check and a bounds check, say)
    /// share its site's exit, which takes the site word (and so the reason)
    /// as a parameter: they all see the frame state before the instruction,
    /// and one copy of the record stores is half the code of two.
    pub(super) fn deopt_when(&mut self, cond: Value, exit: Exit<Variable>) {
        let sw = self.backend.builder.ins().iconst(
            types::I64,
            SaveLayout::site_word(exit.site, exit.reason) as i64,
        );
        let cont = self.backend.builder.create_block();
        if exit.reason == Reason::Safepoint {
            // Stops the slot: an exit of its own.
            let out = self.backend.builder.create_block();
            self.backend.builder.ins().brif(cond, out, &[], cont, &[]);
            self.backend.builder.switch_to_block(out);
            self.deopt_exit(&exit, sw);
        } else {
            self.branch_to_exit(exit, |b, out| {
                b.ins().brif(cond, out, &[sw.into()], cont, &[]);
            });
        }
        self.backend.builder.switch_to_block(cont);
    }

    /// End the current block with `branch`, which goes to the shared
    /// block of `exit`'s site (taking the site word) on failure; the first
    /// time, emit that block's body with [`CpuWalker::deopt_exit`].
    pub(super) fn branch_to_exit(
        &mut self,
        exit: Exit<Variable>,
        branch: impl FnOnce(&mut FunctionBuilder<'_>, Block),
    ) {
        // An exit emitted for another copy of this frame (the same callee
        // inlined again in another version of the body) would read that
        // copy's variables, which are undefined on this path.
        let key = (exit.site, exit.instance);
        let (out, new) = match self.backend.exits.get(&key) {
            Some(&out) => (out, false),
            None => {
                let out = self.backend.builder.create_block();
                self.backend.builder.append_block_param(out, types::I64);
                self.backend.exits.insert(key, out);
                (out, true)
            }
        };
        branch(&mut self.backend.builder, out);
        if new {
            self.backend.builder.switch_to_block(out);
            let param = self.backend.builder.block_params(out)[0];
            self.deopt_exit(&exit, param);
        }
    }

    /// Checked address of element `idx` of array `r`.
    pub(super) fn elem_addr(&mut self, r: Value, idx: Value, size: i64, bci: Bci) -> Value {
        let base = self.obj_addr(r);
        // In the unchecked version, the kernel's accesses `build` proved
        // in bounds for this chunk (0 <= idx < length) go unchecked.
        if !(self.outer.is_empty() && self.backend.unchecked.contains(&bci)) {
            self.null_or_bounds_check(r, base, idx, bci);
        }
        let i64v = self.backend.builder.ins().uextend(types::I64, idx);
        let scaled = self.backend.builder.ins().imul_imm_s(i64v, size);
        let a = self.backend.builder.ins().iadd(base, scaled);
        self.backend.builder.ins().iadd_imm_s(a, 8)
    }

    /// Deopt unless `idx` is inside array `r` (at `base`), in one compare:
    /// null's "header" is heap word 0, reserved and zero, so it reads as an
    /// array of length 0 and every index is out of its bounds. The cold
    /// failure block tells the two apart for the record's reason. (A
    /// separate null check would be loop-invariant for a captured array;
    /// Cranelift hoists its flag out of the loop, and one flag register per
    /// array was what made nbody's inner loop spill.)
    pub(super) fn null_or_bounds_check(&mut self, r: Value, base: Value, idx: Value, bci: Bci) {
        let null_reason = self.null_reason(bci);
        let len = self.array_len(base);
        let oob = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, idx, len);
        let id = self.site_id(bci);
        let fail = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(fail);
        let cont = self.backend.builder.create_block();
        self.backend.builder.ins().brif(oob, fail, &[], cont, &[]);
        self.backend.builder.switch_to_block(fail);
        let is_null = self.backend.builder.ins().icmp_imm_s(IntCC::Equal, r, 0);
        let word = |reason| SaveLayout::site_word(id, reason) as i64;
        let null_word = self
            .backend
            .builder
            .ins()
            .iconst(types::I64, word(null_reason));
        let bounds_word = self
            .backend
            .builder
            .ins()
            .iconst(types::I64, word(Reason::BoundsCheck));
        let sw = self
            .backend
            .builder
            .ins()
            .select(is_null, null_word, bounds_word);
        let exit = self.exit(id, Reason::BoundsCheck, bci);
        self.branch_to_exit(exit, |b, out| {
            b.ins().jump(out, &[sw.into()]);
        });
        self.backend.builder.switch_to_block(cont);
    }
}
