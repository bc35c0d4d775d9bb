//! The CPU slot loop around the kernel's body (the protocol of the module
//! docs): entering a slot, claiming chunks, the control word between
//! workitems, the unchecked and unrolled versions of the item loop, and
//! the slot's exits.

use super::{Cpu, CpuWalker, trusted};
use crate::JitError;
use crate::cpu::opt;
use crate::lower::Backend;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{AtomicRmwOp, Block, InstBuilder, MemFlagsData, Value, types};
use offload_abi::cpu::offsets;
use offload_abi::exit::{
    DEOPT as EXIT_DEOPT, DONE as EXIT_DONE, RECORDED as EXIT_RECORDED, STOPPED as EXIT_STOPPED,
};
use offload_ir::{Kind, SiteId};
use std::collections::BTreeSet;

impl CpuWalker<'_, '_> {
    /// Build the slot function; returns the sites whose records it can
    /// resume (none: it has no re-entry code).
    pub(super) fn build(&mut self) -> Result<BTreeSet<SiteId>, JitError> {
        let f = self.v.func(self.cur.func);
        let (ctx, slot) = self.entry();
        let w = self.var(types::I64);
        let hi = self.var(types::I64);
        let done = self.var(types::I64);
        self.backend.env.w = Some(w);
        self.backend.env.hi = Some(hi);
        self.backend.env.done = Some(done);
        let zero64 = self.backend.builder.ins().iconst(types::I64, 0);
        self.backend.builder.def_var(w, zero64);
        self.backend.builder.def_var(hi, zero64);
        self.backend.builder.def_var(done, zero64);
        // The part the slot claims from: its home part first (the host's
        // word, kept below the part count).
        let part = self.var(types::I64);
        let part_count =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), ctx, offsets::PART_COUNT);
        let words = self.slot_words();
        let home =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), words, offsets::SLOT_HOME);
        let inside = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::UnsignedLessThan, home, part_count);
        let home = self.backend.builder.ins().select(inside, home, zero64);
        self.backend.builder.def_var(part, home);
        if let Some(si) = self.opts.safepoints {
            // The stream goes on from where the slot's last entry left it
            // (every injected deopt is an exit, so restarting it at each
            // entry would replay the same few decisions).
            let polls = self.var(types::I64);
            let at = self.slot_words();
            let saved = self.backend.builder.ins().load(
                types::I64,
                trusted(),
                at,
                offsets::SLOT_INJECT_STATE,
            );
            let init = match si.seed {
                // A non-zero xorshift state per slot.
                Some(seed) => {
                    let s0 = self.backend.builder.ins().iconst(
                        types::I64,
                        (seed | 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) as i64,
                    );
                    let sl = self
                        .backend
                        .builder
                        .ins()
                        .imul_imm_s(slot, 0x2545_F491_4F6C_DD1D);
                    let x = self.backend.builder.ins().bxor(s0, sl);
                    self.backend.builder.ins().bor_imm_u(x, 1)
                }
                None => zero64,
            };
            let fresh = self
                .backend
                .builder
                .ins()
                .icmp_imm_s(IntCC::Equal, saved, 0);
            let state = self.backend.builder.ins().select(fresh, init, saved);
            self.backend.builder.def_var(polls, state);
            self.backend.env.polls = Some(polls);
        }
        for (i, l) in f.locals.iter().enumerate() {
            let var = Cpu::local_var(self, 0, i, l.ty.kind());
            self.cur.locals.push(var);
        }

        let claim = self.backend.builder.create_block();
        let item = self.backend.builder.create_block();
        let next_item = self.backend.builder.create_block();
        let exit_done = self.backend.builder.create_block();
        let stopped = self.backend.builder.create_block();
        let after_deopt = self.backend.builder.create_block();
        for b in [exit_done, stopped, after_deopt] {
            self.backend.builder.set_cold_block(b);
        }
        self.backend.env.after_deopt = Some(after_deopt);
        // A slot that stopped (records full, safepoint) is entered again
        // with its unstarted rest in never_ran[slot]; start there.
        let at = self.slot_words();
        let rest_lo =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), at, offsets::SLOT_NEVER_RAN_LO);
        let rest_hi =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), at, offsets::SLOT_NEVER_RAN_HI);
        self.backend.builder.def_var(w, rest_lo);
        self.values_start_at(rest_lo);
        self.backend.builder.def_var(hi, rest_hi);
        let has_rest = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedLessThan, rest_lo, rest_hi);
        // Entered to resume a record: its workitem alone. A kernel with
        // loops lands at its outermost loop headers in the hot copies of
        // the body (`hot`): the resumed workitem's loop then runs the same
        // machine code as every other workitem's (Cranelift does not align
        // loops; in a copy of its own, `spin`'s loop fell across a cache
        // line and ran 1.5x slower). Every other re-entry point lands in
        // the re-entry copy (`reentry`), which the optimized tier has; the
        // quick tier, compiled while the first launch waits, leaves it out
        // (the interpreter finishes those records).
        let points = !self.opts.no_reentry && self.prog.has_reentry_points(self.cur.func);
        let hot = points && !self.cur.analysis.loop_headers.is_empty();
        let reentry = (points && !self.opts.quick).then(|| self.backend.builder.create_block());
        let resume_entry = (hot || reentry.is_some()).then(|| self.backend.builder.create_block());
        // Where the hot copies' dispatch sends a site they have no landing
        // for: the re-entry copy, or (quick tier) an exit that says so.
        let fallback = match reentry {
            Some(b) => Some(b),
            None => hot.then(|| self.backend.builder.create_block()),
        };
        if let Some(re) = resume_entry {
            self.backend.builder.set_cold_block(re);
            let (_, flag) = self.reenter_word();
            let normal = self.backend.builder.create_block();
            self.backend.builder.ins().brif(flag, re, &[], normal, &[]);
            self.backend.builder.switch_to_block(normal);
        }
        // With accesses indexed by the workitem number, a chunk whose range
        // is inside every such array runs a version of the body without
        // their checks (`opt::workitem_indexed`); the quick tier has one
        // version only.
        let unchecked = if self.opts.quick {
            Default::default()
        } else {
            opt::workitem_indexed(self.v, self.cur.func, self.cur.analysis)
        };
        if !self.opts.quick {
            self.backend.loops = opt::loop_predicates(self.v, self.cur.func, self.cur.analysis);
        }
        let pick = (!unchecked.is_empty()).then(|| self.backend.builder.create_block());
        self.backend
            .builder
            .ins()
            .brif(has_rest, pick.unwrap_or(item), &[], claim, &[]);

        // claim: lo = parts[p].cursor.fetch_add(chunk), from the slot's
        // home part (`offload_abi::cpu::Part`) and then each next part in turn; done
        // once every part is spent. `part` stays on the part that gave
        // the last claim.
        self.backend.builder.switch_to_block(claim);
        if self.opts.quick {
            // The quick tier stops before a claim once the optimized code is
            // ready (`LaunchCtx::better`): its worker enters that for the
            // rest of the launch. The chunk before is done, so nothing is
            // left unstarted.
            let better =
                self.backend
                    .builder
                    .ins()
                    .load(self.backend.ptr, trusted(), ctx, offsets::BETTER);
            let ready = self
                .backend
                .builder
                .ins()
                .atomic_load(types::I32, trusted(), better);
            let go_on = self.backend.builder.create_block();
            self.backend
                .builder
                .ins()
                .brif(ready, stopped, &[], go_on, &[]);
            self.backend.builder.switch_to_block(go_on);
        }
        let parts =
            self.backend
                .builder
                .ins()
                .load(self.backend.ptr, trusted(), ctx, offsets::PARTS);
        let count = part_count;
        let chunk = self
            .backend
            .builder
            .ins()
            .load(types::I64, trusted(), ctx, offsets::CHUNK);
        let tries = self.var(types::I64);
        let zero = self.backend.builder.ins().iconst(types::I64, 0);
        self.backend.builder.def_var(tries, zero);
        let try_part = self.backend.builder.create_block();
        self.backend.builder.ins().jump(try_part, &[]);
        self.backend.builder.switch_to_block(try_part);
        let p = self.backend.builder.use_var(part);
        let off = self
            .backend
            .builder
            .ins()
            .imul_imm_s(p, offsets::PART_BYTES);
        let at = self.backend.builder.ins().iadd(parts, off);
        let end = self
            .backend
            .builder
            .ins()
            .load(types::I64, trusted(), at, offsets::PART_END);
        // A spent part is seen spent without an add: a cursor goes past
        // its end by at most a claim per slot, however often slots come
        // back to it (re-entries start from the home part again), so
        // ranges up to 2^32 below i64::MAX never wrap it.
        let seen = self
            .backend
            .builder
            .ins()
            .atomic_load(types::I64, trusted(), at);
        let was_spent = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, seen, end);
        let add = self.backend.builder.create_block();
        let got = self.backend.builder.create_block();
        let next_part = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(next_part);
        self.backend
            .builder
            .ins()
            .brif(was_spent, next_part, &[], add, &[]);
        self.backend.builder.switch_to_block(add);
        let lo = self.backend.builder.ins().atomic_rmw(
            types::I64,
            trusted(),
            AtomicRmwOp::Add,
            at,
            chunk,
        );
        let spent = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, lo, end);
        self.backend
            .builder
            .ins()
            .brif(spent, next_part, &[], got, &[]);
        self.backend.builder.switch_to_block(next_part);
        let t = self.backend.builder.use_var(tries);
        let t1 = self.backend.builder.ins().iadd_imm_s(t, 1);
        self.backend.builder.def_var(tries, t1);
        let p1 = self.backend.builder.ins().iadd_imm_s(p, 1);
        let wrap = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, p1, count);
        let p2 = self.backend.builder.ins().select(wrap, zero, p1);
        self.backend.builder.def_var(part, p2);
        let all = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, t1, count);
        self.backend
            .builder
            .ins()
            .brif(all, exit_done, &[], try_part, &[]);
        self.backend.builder.switch_to_block(got);
        let lo_chunk = self.backend.builder.ins().iadd(lo, chunk);
        let h = self.backend.builder.ins().smin(lo_chunk, end);
        self.backend.builder.def_var(hi, h);
        self.backend.builder.def_var(w, lo);
        self.values_claim_exit(lo, h, pick.unwrap_or(item));

        if let (Some(re), Some(resume)) = (resume_entry, reentry)
            && !hot
        {
            self.backend.builder.switch_to_block(re);
            self.backend.builder.ins().jump(resume, &[]);
        }
        if let Some(re) = resume_entry.filter(|_| hot) {
            self.backend.builder.switch_to_block(re);
            let rec = self.record_address();
            let wv = self.record_word(rec, offload_deopt::SaveLayout::WORKITEM_WORD);
            self.backend.builder.def_var(w, wv);
            self.values_start_at(wv);
            let w1 = self.backend.builder.ins().iadd_imm_s(wv, 1);
            self.backend.builder.def_var(hi, w1);
            self.backend.builder.ins().jump(pick.unwrap_or(item), &[]);
        }
        // The checked version (with the landings, when the code resumes
        // records).
        self.backend.resume_copy = fallback.filter(|_| hot);
        let checked = self.item_loop(item, claim, stopped, next_item, 1);
        self.backend.resume_copy = None;
        checked?;
        if let Some(pick) = pick {
            // pick: the unchecked version when 0 <= w and hi <= the length
            // of every array those accesses index (null's is 0).
            self.backend.builder.switch_to_block(pick);
            let wv = self.backend.builder.use_var(w);
            let hv = self.backend.builder.use_var(hi);
            let mut ok =
                self.backend
                    .builder
                    .ins()
                    .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, wv, 0);
            let arrays: std::collections::BTreeSet<u32> = unchecked.values().copied().collect();
            for p in arrays {
                let r = self.backend.env.captures[p as usize - 1];
                let base = self.obj_addr(r);
                let len = self.array_len(base);
                let len = self.backend.builder.ins().uextend(types::I64, len);
                let fits = self
                    .backend
                    .builder
                    .ins()
                    .icmp(IntCC::SignedLessThanOrEqual, hv, len);
                ok = self.backend.builder.ins().band(ok, fits);
            }
            let fast_item = self.backend.builder.create_block();
            self.backend
                .builder
                .ins()
                .brif(ok, fast_item, &[], item, &[]);
            let fast_next = self.backend.builder.create_block();
            self.backend.unchecked = unchecked.into_keys().collect();
            self.backend.known = opt::workitem_tests(self.v, self.cur.func, self.cur.analysis);
            self.inliner.next_version();
            let unroll = opt::unroll_factor(self.v, self.cur.func);
            self.backend.resume_copy = fallback.filter(|_| hot && unroll == 1);
            let fast = self.item_loop(fast_item, claim, stopped, fast_next, unroll);
            self.backend.resume_copy = None;
            fast?;
            self.backend.unchecked.clear();
            self.backend.known.clear();
        }

        // after_deopt: the record is written; leave the slot function, to
        // be entered again at the next workitem (`EXIT_RECORDED`), or after
        // the host has replayed the records when they are full. Leaving,
        // rather than jumping back to `item`, keeps the deopt exits out of
        // the loop: Cranelift hoists loop-invariant values out of loops, and
        // those only the exits use would otherwise hold registers (or stack
        // slots) across every workitem.
        self.backend.builder.switch_to_block(after_deopt);
        let n1 = self.count_record();
        let per =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), ctx, offsets::RECORDS_PER_SLOT);
        let full = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, n1, per);
        let wv = self.backend.builder.use_var(w);
        let w1 = self.backend.builder.ins().iadd_imm_s(wv, 1);
        let hv = self.backend.builder.use_var(hi);
        let full_blk = self.backend.builder.create_block();
        let more_blk = self.backend.builder.create_block();
        self.backend
            .builder
            .ins()
            .brif(full, full_blk, &[], more_blk, &[]);
        self.backend.builder.switch_to_block(more_blk);
        self.slot_exit(w1, hv, EXIT_RECORDED);
        self.backend.builder.switch_to_block(full_blk);
        self.slot_exit(w1, hv, EXIT_DEOPT);

        if let Some(resume) = reentry {
            self.reentry_copy(resume)?;
        } else if let Some(fallback) = fallback {
            self.backend.builder.switch_to_block(fallback);
            self.backend.builder.set_cold_block(fallback);
            self.no_landing_exit();
        }

        // exits
        self.backend.builder.switch_to_block(exit_done);
        let z = self.backend.builder.ins().iconst(types::I64, 0);
        self.slot_exit(z, z, EXIT_DONE);
        self.backend.builder.switch_to_block(stopped);
        let wv = self.backend.builder.use_var(w);
        let hv = self.backend.builder.use_var(hi);
        self.slot_exit(wv, hv, EXIT_STOPPED);
        Ok(std::mem::take(&mut self.backend.resumable))
    }

    /// One version of the per-workitem loop: `item` stops between workitems
    /// when the control word is set, and otherwise runs the body, whose
    /// `ret` goes to `next_item`, which counts and advances.
    ///
    /// With `unroll > 1`, while at least `unroll` workitems of the chunk are
    /// left, one check of the control word precedes `unroll` copies of the
    /// body, each ending where the next begins ([`opt::unroll_factor`]);
    /// the last few workitems of a chunk go one by one.
    pub(super) fn item_loop(
        &mut self,
        item: Block,
        claim: Block,
        stopped: Block,
        next_item: Block,
        unroll: u32,
    ) -> Result<(), JitError> {
        let (w, hi) = (
            self.backend.env.w.expect("set"),
            self.backend.env.hi.expect("set"),
        );
        self.backend.builder.switch_to_block(item);
        let wv = self.backend.builder.use_var(w);
        let hv = self.backend.builder.use_var(hi);
        let chunk_done = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::SignedGreaterThanOrEqual, wv, hv);
        let check = self.backend.builder.create_block();
        // A reducing kernel's workitems run one body each (their values
        // go to the buffer one by one, `cpu/reduce.rs`).
        let reduces = self.reduces();
        let vector = unroll == opt::UNROLL
            && !reduces
            && opt::vectorizable(
                self.v,
                self.cur.func,
                &self.backend.unchecked,
                &self.backend.known,
            );
        // A vector group is VECTORS_PER_GROUP SIMD bodies of UNROLL lanes.
        let unroll = if vector {
            unroll * opt::VECTORS_PER_GROUP
        } else {
            unroll
        };
        // Kernels with uniform branches, or none, run lockstep groups of
        // workitems while a group's worth is left (`opt::lockstep`), unless
        // the SIMD groups above took them; a group that cannot finish comes
        // back to `check`. Not with injected safepoints: a group's
        // back-edge polls read the control word only, and the injected
        // ones are the scalar polls' (`SafepointInjection`).
        let plan = if vector || reduces || self.opts.safepoints.is_some() {
            None
        } else {
            opt::lockstep(
                self.v,
                self.cur.func,
                &self.backend.unchecked,
                &self.backend.known,
            )
        };
        if unroll > 1 && plan.is_none() {
            let group = self.backend.builder.create_block();
            let one = self.backend.builder.create_block();
            self.backend
                .builder
                .ins()
                .brif(chunk_done, claim, &[], one, &[]);
            self.backend.builder.switch_to_block(one);
            // SIMD groups stop short of a workitem chosen for an injected
            // deopt, which runs the scalar body (`group_limit`).
            let lim = if vector { self.group_limit(wv, hv) } else { hv };
            let left = self.backend.builder.ins().isub(lim, wv);
            let full = self.backend.builder.ins().icmp_imm_s(
                IntCC::SignedGreaterThanOrEqual,
                left,
                i64::from(unroll),
            );
            self.backend
                .builder
                .ins()
                .brif(full, group, &[], check, &[]);
            self.backend.builder.switch_to_block(group);
            let cw = self.control_word();
            let mut start = self.backend.builder.create_block();
            self.backend
                .builder
                .ins()
                .brif(cw, stopped, &[], start, &[]);
            if vector {
                self.backend.builder.switch_to_block(start);
                if self.backend.wide.is_some() {
                    // A group's worth of 256-bit groups left: the wide
                    // loop runs them, and this loop goes on from where it
                    // stopped.
                    let narrow = self.backend.builder.create_block();
                    let wide = self.backend.builder.create_block();
                    let big = self.backend.builder.ins().icmp_imm_s(
                        IntCC::SignedGreaterThanOrEqual,
                        left,
                        super::wide::GROUP,
                    );
                    self.backend.builder.ins().brif(big, wide, &[], narrow, &[]);
                    self.backend.builder.switch_to_block(wide);
                    self.wide_groups(wv, lim);
                    self.backend.builder.ins().jump(item, &[]);
                    self.backend.builder.switch_to_block(narrow);
                }
                self.vector_group()?;
                self.backend.builder.ins().jump(item, &[]);
            }
            for j in (0..unroll).filter(|_| !vector) {
                let next = self.backend.builder.create_block();
                let then = if j + 1 == unroll {
                    item
                } else {
                    self.backend.builder.create_block()
                };
                self.one_workitem(start, next, then)?;
                start = then;
            }
        } else {
            let more = match plan {
                Some(_) => self.backend.builder.create_block(),
                None => check,
            };
            if self.backend.resume_copy.is_some() {
                // A slot resuming a record runs that workitem alone and
                // leaves.
                let chunk_end = self.backend.builder.create_block();
                self.backend
                    .builder
                    .ins()
                    .brif(chunk_done, chunk_end, &[], more, &[]);
                self.backend.builder.switch_to_block(chunk_end);
                self.chunk_end(claim);
            } else {
                self.backend
                    .builder
                    .ins()
                    .brif(chunk_done, claim, &[], more, &[]);
            }
            if let Some(plan) = plan {
                self.lockstep_entry(&plan, more, check, stopped, item)?;
            }
        }
        self.backend.builder.switch_to_block(check);
        let cw = self.control_word();
        let start = self.backend.builder.create_block();
        self.backend
            .builder
            .ins()
            .brif(cw, stopped, &[], start, &[]);
        self.one_workitem(start, next_item, item)
    }

    /// One copy of the body for workitem `w`, starting at `start`: its
    /// entry (parameters, captures, zeroed locals), the body, whose `ret`
    /// goes to `next`, and `next` itself, which counts the workitem,
    /// advances `w` and goes on to `then`.
    pub(super) fn one_workitem(
        &mut self,
        start: Block,
        next: Block,
        then: Block,
    ) -> Result<(), JitError> {
        let (w, done) = (
            self.backend.env.w.expect("set"),
            self.backend.env.done.expect("set"),
        );
        self.backend.env.next_item = Some(next);
        self.backend.builder.switch_to_block(start);
        let wv = self.backend.builder.use_var(w);
        self.workitem_locals(wv);
        self.nursery_snapshot();
        self.cur.blocks.clear();
        self.make_blocks();
        let first = self.cur.blocks[&0];
        match self.backend.resume_copy {
            None => {
                self.backend.builder.ins().jump(first, &[]);
                self.kernel_body()?;
            }
            Some(resume) => self.body_with_landings(first, resume)?,
        }

        self.backend.builder.switch_to_block(next);
        self.nursery_reset();
        let d = self.backend.builder.use_var(done);
        let d1 = self.backend.builder.ins().iadd_imm_s(d, 1);
        self.backend.builder.def_var(done, d1);
        let wv = self.backend.builder.use_var(w);
        let w1 = self.backend.builder.ins().iadd_imm_s(wv, 1);
        self.backend.builder.def_var(w, w1);
        self.values_full_exit(then);
        Ok(())
    }

    /// A workitem's entry: the kernel's locals for workitem `wv` — its
    /// index, the captures, the rest zero.
    pub(super) fn workitem_locals(&mut self, wv: Value) {
        let f = self.v.func(self.cur.func);
        let lv0 = self.cur.locals[0];
        self.backend.builder.def_var(lv0, wv);
        for i in 1..f.locals.len() {
            let var = self.cur.locals[i];
            let val = if i < f.param_count as usize {
                self.backend.env.captures[i - 1]
            } else {
                self.zero(f.locals[i].ty.kind())
            };
            self.backend.builder.def_var(var, val);
        }
    }

    pub(super) fn kernel_body(&mut self) -> Result<(), JitError> {
        let loops = std::mem::take(&mut self.backend.loops);
        let res = self.body_with_predicated_loops(
            &loops,
            |lp| lp.header,
            |w, lp, t| w.predicated_loop(lp, t),
        );
        self.backend.loops = loops;
        res
    }

    /// The address of this slot's [`offload_abi::cpu::SlotWords`].
    pub(super) fn slot_words(&mut self) -> Value {
        let (ctx, slot, _) = self.base_values();
        let words =
            self.backend
                .builder
                .ins()
                .load(self.backend.ptr, trusted(), ctx, offsets::SLOTS);
        let off = self
            .backend
            .builder
            .ins()
            .imul_imm_s(slot, offsets::SLOT_BYTES);
        self.backend.builder.ins().iadd(words, off)
    }

    /// This slot's record count: the records it has written and the host
    /// has not replayed yet. Only deopt exits change it, and they leave the
    /// slot function, so it is kept in memory rather than in a variable
    /// that would hold a register across the loop.
    pub(super) fn records_count(&mut self) -> Value {
        let at = self.slot_words();
        self.backend
            .builder
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_RECORDS)
    }

    /// Count the record just written; returns the count.
    pub(super) fn count_record(&mut self) -> Value {
        let at = self.slot_words();
        let n = self
            .backend
            .builder
            .ins()
            .load(types::I64, trusted(), at, offsets::SLOT_RECORDS);
        let n1 = self.backend.builder.ins().iadd_imm_s(n, 1);
        self.backend
            .builder
            .ins()
            .store(trusted(), n1, at, offsets::SLOT_RECORDS);
        n1
    }

    /// The control word, read through the context each time: the pointer
    /// is not kept in a register across the loop (the load hits L1).
    pub(super) fn control_word(&mut self) -> Value {
        let control = self.control_ptr();
        self.backend
            .builder
            .ins()
            .atomic_load(types::I32, trusted(), control)
    }

    /// The control word's address, from the context.
    pub(super) fn control_ptr(&mut self) -> Value {
        let (ctx, _, _) = self.base_values();
        self.backend
            .builder
            .ins()
            .load(self.backend.ptr, super::invariant(), ctx, offsets::CONTROL)
    }

    /// A raw 64-bit slot as a value of kind `k`.
    /// The slot function's entry block: the context and slot number (its
    /// parameters), and from the context the heap base, the page table,
    /// the TLAB state and reduction buffer where the kernel has them, and
    /// the captures (those a launch may sum into from the slot's row of
    /// the copies table, `LaunchCtx::copies`).
    fn entry(&mut self) -> (Value, Value) {
        let f = self.v.func(self.cur.func);
        let entry = self.backend.builder.create_block();
        self.backend
            .builder
            .append_block_params_for_function_params(entry);
        self.backend.builder.switch_to_block(entry);
        let ctx = self.backend.builder.block_params(entry)[0];
        let slot = self.backend.builder.block_params(entry)[1];
        let heap =
            self.backend
                .builder
                .ins()
                .load(self.backend.ptr, trusted(), ctx, offsets::HEAP_BASE);
        let caps =
            self.backend
                .builder
                .ins()
                .load(self.backend.ptr, trusted(), ctx, offsets::CAPTURES);
        // The page table, for dispatch by address (removed when unused).
        let pages = self.backend.builder.ins().load(
            self.backend.ptr,
            super::invariant(),
            ctx,
            offsets::PAGES,
        );
        self.backend.env.ctx = Some(ctx);
        self.backend.env.slot = Some(slot);
        self.backend.env.heap = Some(heap);
        self.backend.env.pages = Some(pages);
        if self.backend.allocates {
            let nv = self.var(types::I64);
            let off = self.nursery_off();
            self.backend.builder.def_var(nv, off);
            self.backend.env.nursery = Some(nv);
            let zero = self.backend.builder.ins().iconst(types::I64, 0);
            // The TLAB state, from memory when the slot owns its TLAB.
            let sv = self.var(types::I64);
            self.backend.env.tlab_state = Some(sv);
            self.backend.builder.def_var(sv, zero);
            self.tlab_reload();
        }
        self.values_setup();
        let summable = self.cur.analysis.summable.clone();
        let row = (!summable.is_empty()).then(|| self.copies_row(ctx, slot, summable.len()));
        for (i, p) in f.params().iter().enumerate().skip(1) {
            let (base, at) = match (row, summable.iter().position(|&s| s as usize == i)) {
                (Some(row), Some(j)) => (row, j * 8),
                _ => (caps, (i - 1) * 8),
            };
            let raw = self
                .backend
                .builder
                .ins()
                .load(types::I64, trusted(), base, at as i32);
            let val = self.unpack_raw(p.ty.kind(), raw);
            self.backend.env.captures.push(val);
        }
        (ctx, slot)
    }

    /// The address of slot `slot`'s row of the copies table, of `per_row`
    /// raw slots: row `slot % copy_rows`.
    fn copies_row(&mut self, ctx: Value, slot: Value, per_row: usize) -> Value {
        let b = &mut self.backend.builder;
        let table = b.ins().load(types::I64, trusted(), ctx, offsets::COPIES);
        let rows = b.ins().load(types::I64, trusted(), ctx, offsets::COPY_ROWS);
        let slot = if b.func.dfg.value_type(slot) == types::I64 {
            slot
        } else {
            b.ins().uextend(types::I64, slot)
        };
        let r = b.ins().urem(slot, rows);
        let off = b.ins().imul_imm_s(r, (per_row * 8) as i64);
        b.ins().iadd(table, off)
    }

    pub(super) fn unpack_raw(&mut self, k: Kind, raw: Value) -> Value {
        match k {
            Kind::I64 => raw,
            Kind::I32 | Kind::Ref => self.backend.builder.ins().ireduce(types::I32, raw),
            Kind::F32 => {
                let lo = self.backend.builder.ins().ireduce(types::I32, raw);
                self.backend
                    .builder
                    .ins()
                    .bitcast(types::F32, MemFlagsData::new(), lo)
            }
            Kind::F64 => self
                .backend
                .builder
                .ins()
                .bitcast(types::F64, MemFlagsData::new(), raw),
        }
    }

    /// A value of kind `k` as a raw 64-bit slot (the save-record format).
    pub(super) fn pack_raw(&mut self, k: Kind, x: Value) -> Value {
        match k {
            Kind::I64 => x,
            Kind::I32 | Kind::Ref => self.backend.builder.ins().uextend(types::I64, x),
            Kind::F32 => {
                let bits = self
                    .backend
                    .builder
                    .ins()
                    .bitcast(types::I32, MemFlagsData::new(), x);
                self.backend.builder.ins().uextend(types::I64, bits)
            }
            Kind::F64 => self
                .backend
                .builder
                .ins()
                .bitcast(types::I64, MemFlagsData::new(), x),
        }
    }

    /// Store this slot's counters and never-ran range, and return `code`.
    pub(super) fn slot_exit(&mut self, nr_lo: Value, nr_hi: Value, code: u32) {
        self.tlab_write_back();
        self.values_write_back();
        let at = self.slot_words();
        self.backend
            .builder
            .ins()
            .store(trusted(), nr_lo, at, offsets::SLOT_NEVER_RAN_LO);
        self.backend
            .builder
            .ins()
            .store(trusted(), nr_hi, at, offsets::SLOT_NEVER_RAN_HI);
        let done = self
            .backend
            .builder
            .use_var(self.backend.env.done.expect("set"));
        self.backend
            .builder
            .ins()
            .store(trusted(), done, at, offsets::SLOT_COMPLETED);
        let c = self
            .backend
            .builder
            .ins()
            .iconst(types::I32, i64::from(code));
        self.backend.builder.ins().return_(&[c]);
    }
}
