//! Resuming a stopped workitem in the CPU slot loop (module docs,
//! "Re-entry"): the dispatch of the hot copies of the body, which land at
//! the kernel's outermost loop headers, and the re-entry copy, which lands
//! at every re-entry point.

use super::{CpuWalker, trusted};
use crate::JitError;
use crate::lower::reentry::Scope;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Block, InstBuilder, Value, types};
use offload_abi::cpu::offsets;
use offload_deopt::SaveLayout;
use offload_ir::SiteId;

impl CpuWalker<'_, '_> {
    /// This slot's `SlotWords::reenter` word: its address and value.
    pub(super) fn reenter_word(&mut self) -> (Value, Value) {
        let at = self.slot_words();
        let flag =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), at, offsets::SLOT_REENTER);
        (at, flag)
    }

    /// Set this slot's `SlotWords::reenter` word (at `at`) to `v`.
    pub(super) fn set_reenter(&mut self, at: Value, v: i64) {
        let x = self.backend.builder.ins().iconst(types::I64, v);
        self.backend
            .builder
            .ins()
            .store(trusted(), x, at, offsets::SLOT_REENTER);
    }

    /// Word `word` of the record at `rec`.
    pub(super) fn record_word(&mut self, rec: Value, word: u32) -> Value {
        self.backend
            .builder
            .ins()
            .load(types::I64, trusted(), rec, (word * 8) as i32)
    }

    /// The site id of the record at `rec`, as an `i32`.
    fn record_site(&mut self, rec: Value) -> Value {
        let sw = self.record_word(rec, SaveLayout::SITE_WORD);
        self.backend.builder.ins().ireduce(types::I32, sw)
    }

    /// End the current block with a jump on `site` to its landing, or to
    /// `default` for a site without one (a site landed at twice keeps its
    /// first landing). Records the sites as ones the code resumes.
    fn dispatch(&mut self, site: Value, landings: Vec<(SiteId, Block)>, default: Block) {
        let mut switch = cranelift_frontend::Switch::new();
        let mut seen = std::collections::BTreeSet::new();
        for (id, land) in landings {
            if seen.insert(id) {
                switch.set_entry(u128::from(id.0), land);
            }
        }
        self.backend.resumable.extend(seen);
        switch.emit(&mut self.backend.builder, site, default);
    }

    /// The body of a hot copy of a kernel with re-entry code, its first
    /// block `first`: a workitem the host asked the slot to resume
    /// (`SlotWords::reenter` is 1; it becomes 2 while the workitem runs)
    /// dispatches on its record's site to a landing at one of the kernel's
    /// outermost loop headers, in this copy — resumed, the loop runs the
    /// hot code — or else to `fallback` (the re-entry copy, which lands
    /// everywhere, or in the quick tier an exit that says no landing).
    pub(super) fn body_with_landings(
        &mut self,
        first: Block,
        fallback: Block,
    ) -> Result<(), JitError> {
        let (at, flag) = self.reenter_word();
        let pending = self.backend.builder.ins().icmp_imm_s(IntCC::Equal, flag, 1);
        let pre = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(pre);
        self.backend
            .builder
            .ins()
            .brif(pending, pre, &[], first, &[]);
        self.backend.builder.switch_to_block(pre);
        self.set_reenter(at, 2);
        let rec = self.record_address();
        let site = self.record_site(rec);
        if let Some(nv) = self.backend.env.nursery {
            let off = self.nursery_off();
            self.backend.builder.def_var(nv, off);
        }
        let dispatch = self.backend.builder.create_block();
        self.backend.builder.ins().jump(dispatch, &[]);
        self.backend.env.reentry_record = Some(rec);
        let landings = self.landing_in(Scope::OutermostLoops, Self::kernel_body);
        self.backend.env.reentry_record = None;
        let landings = landings?;
        self.backend.builder.switch_to_block(dispatch);
        self.dispatch(site, landings, fallback);
        Ok(())
    }

    /// The re-entry copy of the body, entered at `start` when the host
    /// asks the slot to resume the record just past its count
    /// ([`offload_abi::cpu::SlotWords::reenter`]) and the hot copies have no
    /// landing for its site: the workitem's entry as [`CpuWalker::one_workitem`]
    /// makes it, then a dispatch on the record's site to that site's
    /// landing (`lower/reentry.rs`), which loads the saved frames and jumps
    /// to where the workitem stopped. The workitem's end leaves with
    /// `EXIT_RESUMED`; a deopt leaves through the shared exits (with an
    /// empty unstarted rest: `hi` is the workitem's successor).
    ///
    /// The copy is lowered plainly (no predicated loops, no unchecked
    /// accesses) and apart from the hot copies: its landings enter loops
    /// below their headers, which would make the hot copies' loops
    /// irreducible and cost them Cranelift's loop optimizations. Its
    /// workitem's objects are not handed back at its end (the nursery is
    /// off: objects from before the stop lie below any snapshot).
    pub(super) fn reentry_copy(&mut self, start: Block) -> Result<(), JitError> {
        let (w, hi, done) = (
            self.backend.env.w.expect("set"),
            self.backend.env.hi.expect("set"),
            self.backend.env.done.expect("set"),
        );
        self.backend.builder.switch_to_block(start);
        let at = self.slot_words();
        self.set_reenter(at, 0);
        let rec = self.record_address();
        let wv = self.record_word(rec, SaveLayout::WORKITEM_WORD);
        let site = self.record_site(rec);
        self.backend.builder.def_var(w, wv);
        self.values_start_at(wv);
        let w1 = self.backend.builder.ins().iadd_imm_s(wv, 1);
        self.backend.builder.def_var(hi, w1);
        let zero = self.backend.builder.ins().iconst(types::I64, 0);
        self.backend.builder.def_var(done, zero);
        self.workitem_locals(wv);
        if let Some(nv) = self.backend.env.nursery {
            let off = self.nursery_off();
            self.backend.builder.def_var(nv, off);
        }
        let dispatch = self.backend.builder.create_block();
        self.backend.builder.ins().jump(dispatch, &[]);

        let resumed = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(resumed);
        self.backend.env.next_item = Some(resumed);
        self.backend.env.reentry_record = Some(rec);
        self.cur.blocks.clear();
        self.make_blocks();
        self.inliner.next_version();
        let landings = self.lower_with_landings();
        self.backend.env.reentry_record = None;
        let landings = landings?;

        self.backend.builder.switch_to_block(dispatch);
        let no_landing = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(no_landing);
        self.dispatch(site, landings, no_landing);

        self.backend.builder.switch_to_block(resumed);
        let one = self.backend.builder.ins().iconst(types::I64, 1);
        self.backend.builder.def_var(done, one);
        let wv = self.backend.builder.use_var(w);
        let hv = self.backend.builder.use_var(hi);
        let w1 = self.backend.builder.ins().iadd_imm_s(wv, 1);
        self.slot_exit(w1, hv, offload_abi::exit::RESUMED);
        self.backend.builder.switch_to_block(no_landing);
        self.no_landing_exit();
        Ok(())
    }

    /// Leave with `EXIT_NO_LANDING`: the record's site has no landing here.
    pub(super) fn no_landing_exit(&mut self) {
        let (w, hi) = (
            self.backend.env.w.expect("set"),
            self.backend.env.hi.expect("set"),
        );
        let wv = self.backend.builder.use_var(w);
        let hv = self.backend.builder.use_var(hi);
        self.slot_exit(wv, hv, offload_abi::exit::NO_LANDING);
    }

    /// Where the checked item loop goes when its chunk is done (`chunk_end`,
    /// current block): a slot resuming a record has run that workitem
    /// alone and leaves with `EXIT_RESUMED`; any other claims.
    pub(super) fn chunk_end(&mut self, claim: Block) {
        let (at, flag) = self.reenter_word();
        let resumed = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(resumed);
        self.backend
            .builder
            .ins()
            .brif(flag, resumed, &[], claim, &[]);
        self.backend.builder.switch_to_block(resumed);
        self.set_reenter(at, 0);
        let (w, hi) = (
            self.backend.env.w.expect("set"),
            self.backend.env.hi.expect("set"),
        );
        let wv = self.backend.builder.use_var(w);
        let hv = self.backend.builder.use_var(hi);
        self.slot_exit(wv, hv, offload_abi::exit::RESUMED);
    }
}
