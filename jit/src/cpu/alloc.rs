//! Allocation in compiled CPU code: the shared-TLAB fast path inline, the
//! slow path's call, the write barrier and the nursery reset (module docs).

use super::{CpuWalker, invariant, trusted};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{AtomicRmwOp, InstBuilder, Value, types};
use cranelift_frontend::Variable;
use offload_abi::cpu::offsets;
use offload_deopt::Reason;
use offload_ir::Bci;

impl CpuWalker<'_, '_> {
    /// The write barrier of a reference store of `x` into the object at
    /// `r`: note in the slot's `escaped` word when `x` is an object of this
    /// launch and `r` an older one (`LaunchCtx::young`), which keeps the
    /// launch's objects when it ends. Null is never young (word 0).
    ///
    /// In a kernel that may allocate, the test is the nursery's: `x` lies
    /// in the running workitem's part of its TLAB and `r` does not (which
    /// also ends the workitem's chance of a reset); after a refill or such
    /// an escape it is the launch's test again ([`CpuWalker::nursery_off`]).
    pub(super) fn write_barrier(&mut self, r: Value, x: Value) {
        let escapes = if let Some(nv) = self.backend.env.nursery {
            // In register form, `[top, end)` is `top` and its length.
            let st = self.backend.builder.use_var(nv);
            let lo = self.backend.builder.ins().ireduce(types::I32, st);
            let span = self.backend.builder.ins().ushr_imm_u(st, 32);
            let span = self.backend.builder.ins().ireduce(types::I32, span);
            let dx = self.backend.builder.ins().isub(x, lo);
            let in_x = self
                .backend
                .builder
                .ins()
                .icmp(IntCC::UnsignedLessThan, dx, span);
            let dr = self.backend.builder.ins().isub(r, lo);
            let in_r = self
                .backend
                .builder
                .ins()
                .icmp(IntCC::UnsignedLessThan, dr, span);
            self.backend.builder.ins().band_not(in_x, in_r)
        } else {
            let (ctx, _, _) = self.base_values();
            let young = self
                .backend
                .builder
                .ins()
                .load(types::I64, trusted(), ctx, offsets::YOUNG);
            let young = self.backend.builder.ins().ireduce(types::I32, young);
            let new_x =
                self.backend
                    .builder
                    .ins()
                    .icmp(IntCC::UnsignedGreaterThanOrEqual, x, young);
            let old_r = self
                .backend
                .builder
                .ins()
                .icmp(IntCC::UnsignedLessThan, r, young);
            self.backend.builder.ins().band(new_x, old_r)
        };
        let note = self.backend.builder.create_block();
        let cont = self.backend.builder.create_block();
        self.backend.builder.set_cold_block(note);
        self.backend
            .builder
            .ins()
            .brif(escapes, note, &[], cont, &[]);
        self.backend.builder.switch_to_block(note);
        let at = self.slot_words();
        let one = self.backend.builder.ins().iconst(types::I64, 1);
        self.backend
            .builder
            .ins()
            .store(trusted(), one, at, offsets::SLOT_ESCAPED);
        if let Some(nv) = self.backend.env.nursery {
            let off = self.nursery_off();
            self.backend.builder.def_var(nv, off);
        }
        self.backend.builder.ins().jump(cont, &[]);
        self.backend.builder.switch_to_block(cont);
    }

    /// The nursery state of a workitem that will not be reset: a TLAB
    /// state (in register form, [`Env::tlab_state`]) whose `[top, end)` is
    /// `[young, u32::MAX)`, so that the write barrier tests what the
    /// launch's does, and whose `end` no TLAB has.
    pub(super) fn nursery_off(&mut self) -> Value {
        let (ctx, _, _) = self.base_values();
        let young = self
            .backend
            .builder
            .ins()
            .load(types::I64, invariant(), ctx, offsets::YOUNG);
        // u32::MAX - young is young's low 32 bits flipped.
        let span = self.backend.builder.ins().bxor_imm_u(young, 0xFFFF_FFFF);
        let span = self.backend.builder.ins().ishl_imm_u(span, 32);
        self.backend.builder.ins().bor(young, span)
    }

    /// The `top` of a TLAB state in register form (its low half), as `i64`.
    pub(super) fn state_top(&mut self, st: Value) -> Value {
        let top = self.backend.builder.ins().ireduce(types::I32, st);
        self.backend.builder.ins().uextend(types::I64, top)
    }

    /// The low 32 bits of `top + (end - top)` of a TLAB state in register
    /// form: `end`.
    pub(super) fn state_end(&mut self, st: Value) -> Value {
        let top = self.backend.builder.ins().ireduce(types::I32, st);
        let span = self.backend.builder.ins().ushr_imm_u(st, 32);
        let span = self.backend.builder.ins().ireduce(types::I32, span);
        self.backend.builder.ins().iadd(top, span)
    }

    /// At a workitem's start (kernels that may allocate): note the slot's
    /// TLAB state when the launch lets workitems hand their objects back,
    /// else [`CpuWalker::nursery_off`].
    pub(super) fn nursery_snapshot(&mut self) {
        let Some(nv) = self.backend.env.nursery else {
            return;
        };
        let (ctx, _, _) = self.base_values();
        let on = self
            .backend
            .builder
            .ins()
            .load(types::I64, invariant(), ctx, offsets::NURSERY);
        let snap = self.backend.builder.create_block();
        let cont = self.backend.builder.create_block();
        self.backend.builder.append_block_param(cont, types::I64);
        let off = self.nursery_off();
        self.backend
            .builder
            .ins()
            .brif(on, snap, &[], cont, &[off.into()]);
        self.backend.builder.switch_to_block(snap);
        // The nursery is on only when every slot owns its TLAB.
        let st = self
            .backend
            .builder
            .use_var(self.backend.env.tlab_state.expect("set"));
        self.backend.builder.ins().jump(cont, &[st.into()]);
        self.backend.builder.switch_to_block(cont);
        let st = self.backend.builder.block_params(cont)[0];
        self.backend.builder.def_var(nv, st);
    }

    /// At a workitem's normal end (kernels that may allocate): when its
    /// objects all lie in its slot's TLAB above the snapshot and none was
    /// stored where it could outlive the workitem, zero them and move the
    /// TLAB's `top` back to the snapshot, counting the words in the slot's
    /// `recycled`.
    /// The next workitem allocates in the same, cache-warm words.
    pub(super) fn nursery_reset(&mut self) {
        let Some(nv) = self.backend.env.nursery else {
            return;
        };
        let st0 = self.backend.builder.use_var(nv);
        let end0 = self.state_end(st0);
        let off = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::Equal, end0, -1);
        let check = self.backend.builder.create_block();
        let reset = self.backend.builder.create_block();
        let after = self.backend.builder.create_block();
        self.backend.builder.ins().brif(off, after, &[], check, &[]);
        self.backend.builder.switch_to_block(check);
        let sv = self.backend.env.tlab_state.expect("set");
        let st = self.backend.builder.use_var(sv);
        let end = self.state_end(st);
        let same = self.backend.builder.ins().icmp(IntCC::Equal, end, end0);
        let top = self.state_top(st);
        let lo = self.state_top(st0);
        let grew = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::UnsignedGreaterThan, top, lo);
        let go = self.backend.builder.ins().band(same, grew);
        self.backend.builder.ins().brif(go, reset, &[], after, &[]);
        self.backend.builder.switch_to_block(reset);
        self.zero_words(lo, top);
        let at = self.slot_words();
        let n = self.backend.builder.ins().isub(top, lo);
        let was =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), at, offsets::SLOT_RECYCLED);
        let now = self.backend.builder.ins().iadd(was, n);
        self.backend
            .builder
            .ins()
            .store(trusted(), now, at, offsets::SLOT_RECYCLED);
        self.backend.builder.def_var(sv, st0);
        self.backend.builder.ins().jump(after, &[]);
        self.backend.builder.switch_to_block(after);
    }

    /// Zero the heap words `[lo, top)` (`lo < top`, both `i64`), inline:
    /// 64 bytes a round while they last, then a word at a time. A call
    /// (even to `memset`) at the end of every workitem would clobber the
    /// caller-saved registers, and every value live across the slot loop
    /// — the context, the slot, the chunk's bounds — would have to sit in
    /// the five callee-saved ones or on the stack.
    pub(super) fn zero_words(&mut self, lo: Value, top: Value) {
        let (_, _, heap) = self.base_values();
        let p0 = self.backend.builder.ins().ishl_imm_u(lo, 3);
        let p0 = self.backend.builder.ins().iadd(heap, p0);
        let e = self.backend.builder.ins().ishl_imm_u(top, 3);
        let e = self.backend.builder.ins().iadd(heap, e);
        let z64 = self.backend.builder.ins().iconst(types::I64, 0);
        let zv = self.backend.builder.ins().splat(types::I64X2, z64);
        let wide = self.backend.builder.create_block();
        let wide_body = self.backend.builder.create_block();
        let narrow = self.backend.builder.create_block();
        let narrow_body = self.backend.builder.create_block();
        let done = self.backend.builder.create_block();
        for blk in [wide, wide_body, narrow, narrow_body] {
            self.backend
                .builder
                .append_block_param(blk, self.backend.ptr);
        }
        self.backend.builder.ins().jump(wide, &[p0.into()]);
        self.backend.builder.switch_to_block(wide);
        let p = self.backend.builder.block_params(wide)[0];
        let p64 = self.backend.builder.ins().iadd_imm_s(p, 64);
        let room = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, p64, e);
        self.backend
            .builder
            .ins()
            .brif(room, wide_body, &[p.into()], narrow, &[p.into()]);
        self.backend.builder.switch_to_block(wide_body);
        let p = self.backend.builder.block_params(wide_body)[0];
        for k in 0..4 {
            self.backend.builder.ins().store(trusted(), zv, p, 16 * k);
        }
        let p64 = self.backend.builder.ins().iadd_imm_s(p, 64);
        self.backend.builder.ins().jump(wide, &[p64.into()]);
        self.backend.builder.switch_to_block(narrow);
        let p = self.backend.builder.block_params(narrow)[0];
        let more = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::UnsignedLessThan, p, e);
        self.backend
            .builder
            .ins()
            .brif(more, narrow_body, &[p.into()], done, &[]);
        self.backend.builder.switch_to_block(narrow_body);
        let p = self.backend.builder.block_params(narrow_body)[0];
        self.backend.builder.ins().store(trusted(), z64, p, 0);
        let p8 = self.backend.builder.ins().iadd_imm_s(p, 8);
        self.backend.builder.ins().jump(narrow, &[p8.into()]);
        self.backend.builder.switch_to_block(done);
    }

    /// This slot's TLAB of the first kind ([`CpuWalker::tlab_of`]), the
    /// one whose state [`Env::tlab_state`] keeps.
    pub(super) fn tlab(&mut self) -> Value {
        self.tlab_of(0)
    }

    /// This slot's TLAB of `kind` (an index into [`Cpu::alloc_kinds`];
    /// null: the policy has none), at `LaunchCtx::tlabs[slot * kinds +
    /// kind]`. Loaded where it is used — on the allocation paths that leave
    /// the slot's own bump — rather than kept in a register through every
    /// loop that allocates (so are [`CpuWalker::own_limit`] and the
    /// large-object limit).
    pub(super) fn tlab_of(&mut self, kind: usize) -> Value {
        let (ctx, slot, _) = self.base_values();
        let kinds = self.backend.alloc_kinds.len() as i64;
        let index = if kinds == 1 {
            slot
        } else {
            let at = self.backend.builder.ins().imul_imm_s(slot, kinds);
            self.backend.builder.ins().iadd_imm_s(at, kind as i64)
        };
        let tlabs =
            self.backend
                .builder
                .ins()
                .load(self.backend.ptr, trusted(), ctx, offsets::TLABS);
        let toff = self
            .backend
            .builder
            .ins()
            .imul_imm_s(index, i64::from(self.backend.ptr.bytes()));
        let tat = self.backend.builder.ins().iadd(tlabs, toff);
        self.backend
            .builder
            .ins()
            .load(self.backend.ptr, trusted(), tat, 0)
    }

    /// The largest object this slot bumps in a TLAB of its own
    /// (`LaunchCtx::own_limit`; 0 when it has none).
    pub(super) fn own_limit(&mut self) -> Value {
        let (ctx, _, _) = self.base_values();
        self.backend
            .builder
            .ins()
            .load(types::I64, trusted(), ctx, offsets::OWN_LIMIT)
    }

    /// The address of TLAB `tl`'s state word (`end << 32 | top`).
    pub(super) fn tlab_state_addr(&mut self, tl: Value) -> Value {
        self.backend
            .builder
            .ins()
            .iadd_imm_s(tl, i64::from(offload_abi::tlab::STATE_OFFSET))
    }

    /// Store the TLAB state kept in [`Env::tlab_state`] to memory, on a
    /// slot that owns its TLAB: before Rust code may read or change it.
    pub(super) fn tlab_write_back(&mut self) {
        self.when_own(|lw, sv| {
            let st = lw.backend.builder.use_var(sv);
            let tl = lw.tlab();
            lw.store_tlab_state(tl, st);
        });
    }

    /// Store `st`, a TLAB state in register form ([`Env::tlab_state`]), to
    /// TLAB `tl`'s memory word: `end << 32 | top` is `st + (st << 32)`.
    pub(super) fn store_tlab_state(&mut self, tl: Value, st: Value) {
        let sa = self.tlab_state_addr(tl);
        let hi = self.backend.builder.ins().ishl_imm_u(st, 32);
        let word = self.backend.builder.ins().iadd(st, hi);
        self.backend.builder.ins().store(trusted(), word, sa, 0);
    }

    /// Take the TLAB state from memory again, on a slot that owns its
    /// TLAB, after Rust code or the shared protocol may have changed it.
    /// The register form of the word `end << 32 | top` is the word minus
    /// `top << 32`, which is the word shifted left by 32.
    pub(super) fn tlab_reload(&mut self) {
        self.when_own(|lw, sv| {
            let tl = lw.tlab();
            let sa = lw.tlab_state_addr(tl);
            let word = lw.backend.builder.ins().load(types::I64, trusted(), sa, 0);
            let lo = lw.backend.builder.ins().ishl_imm_u(word, 32);
            let st = lw.backend.builder.ins().isub(word, lo);
            lw.backend.builder.def_var(sv, st);
        });
    }

    /// Emit `body` (given [`Env::tlab_state`]) in a block run only on a
    /// slot that owns its TLAB; nothing in kernels that do not allocate.
    pub(super) fn when_own(&mut self, body: impl FnOnce(&mut Self, Variable)) {
        let Some(sv) = self.backend.env.tlab_state else {
            return;
        };
        let own = self.own_limit();
        let then = self.backend.builder.create_block();
        let cont = self.backend.builder.create_block();
        self.backend.builder.ins().brif(own, then, &[], cont, &[]);
        self.backend.builder.switch_to_block(then);
        body(self, sv);
        self.backend.builder.ins().jump(cont, &[]);
        self.backend.builder.switch_to_block(cont);
    }

    /// Unpack a TLAB state word `st` (`end << 32 | top`): `top`, and whether
    /// an object of `words` words fits at it.
    pub(super) fn tlab_fits(&mut self, st: Value, words: Value) -> (Value, Value) {
        let top = self.backend.builder.ins().band_imm_u(st, 0xFFFF_FFFF);
        let end = self.backend.builder.ins().ushr_imm_u(st, 32);
        let new_top = self.backend.builder.ins().iadd(top, words);
        let fits = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, new_top, end);
        (top, fits)
    }

    /// Allocate an object with header words `(tag, word1)` of `words` heap
    /// words (`i64`), whose page tag (`offload_abi::pages`) is `page_tag`:
    /// the TLAB fast path inline, on the slot's TLAB of that kind, the slow
    /// path in Rust. Failure deopts with `AllocationFailure`, a safepoint
    /// requested during the slow path with `Safepoint` (the frame state is
    /// the current one, which must be the site's state at `bci`). Returns
    /// the reference.
    ///
    /// Only the first kind's TLAB state lives in a register
    /// ([`Env::tlab_state`]): the others take the shared protocol on their
    /// memory word, and a workitem that allocates from them is not reset
    /// by the nursery.
    pub(super) fn allocate(
        &mut self,
        bci: Bci,
        page_tag: u32,
        tag: Value,
        word1: Value,
        words: Value,
    ) -> Value {
        let kind = offload_heap::alloc::kind_of(&self.backend.alloc_kinds, Some(page_tag));
        let (_, slot, heap) = self.base_values();
        let done = self.backend.builder.create_block();
        self.backend.builder.append_block_param(done, types::I32);
        let slow = self.backend.builder.create_block();
        for t in [types::I64, types::I64, types::I32] {
            self.backend.builder.append_block_param(slow, t);
        }
        let try_fast = self.backend.builder.create_block();
        self.backend
            .builder
            .append_block_param(try_fast, self.backend.ptr);
        let add = self.backend.builder.create_block();
        let got = self.backend.builder.create_block();
        self.backend.builder.append_block_param(got, types::I64);

        let z64 = self.backend.builder.ins().iconst(types::I64, 0);
        let z32 = self.backend.builder.ins().iconst(types::I32, 0);
        // Both header words as one (constants for `new`, which the
        // optimized tier folds): one store, one argument.
        let t64 = self.backend.builder.ins().uextend(types::I64, tag);
        let w64 = self.backend.builder.ins().uextend(types::I64, word1);
        let w64 = self.backend.builder.ins().ishl_imm_u(w64, 32);
        let header = self.backend.builder.ins().bor(t64, w64);
        let shared = self.backend.builder.create_block();
        let own_bump = self.backend.builder.create_block();
        // One compare decides the common case: a small object of the first
        // kind and a TLAB of this slot's own (`LaunchCtx::own_limit`, in
        // memory).
        if kind == Some(0) {
            let own_limit = self.own_limit();
            let own =
                self.backend
                    .builder
                    .ins()
                    .icmp(IntCC::UnsignedLessThanOrEqual, words, own_limit);
            self.backend
                .builder
                .ins()
                .brif(own, own_bump, &[], shared, &[]);
        } else {
            self.backend.builder.ins().jump(shared, &[]);
        }

        // Otherwise a small object goes to the shared protocol, a large
        // one (or any without a TLAB) to the slow path.
        self.backend.builder.switch_to_block(shared);
        // Both work on the memory word (a large object's slow path may
        // park at a safepoint, and reloads the word when it returns).
        self.tlab_write_back();
        // (A site of no kind — never made: the kinds come from the same
        // instructions — goes to the slow path, which places it apart.)
        let tl = match kind {
            Some(k) => self.tlab_of(k),
            None => self.backend.builder.ins().iconst(self.backend.ptr, 0),
        };
        let (ctx, _, _) = self.base_values();
        let large =
            self.backend
                .builder
                .ins()
                .load(types::I64, trusted(), ctx, offsets::LARGE_WORDS);
        let has = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::NotEqual, tl, 0);
        let small = self
            .backend
            .builder
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, words, large);
        let ok = self.backend.builder.ins().band(has, small);
        self.backend.builder.ins().brif(
            ok,
            try_fast,
            &[tl.into()],
            slow,
            &[z64.into(), z64.into(), z32.into()],
        );

        // Step 0, a TLAB of this slot's own: bump `top` with a plain load
        // and store when the object fits (no one else touches the state
        // during the launch, and a FAILED slot never fits: the failing
        // refiller's add left `top` past `end`); else the shared protocol.
        self.backend.builder.switch_to_block(own_bump);
        let sv = self
            .backend
            .env
            .tlab_state
            .expect("kernels that allocate keep it");
        let st = self.backend.builder.use_var(sv);
        // In register form: top += words and end - top -= words, in one
        // add; the object fits when end - top stays non-negative.
        let hi = self.backend.builder.ins().ishl_imm_u(words, 32);
        let step = self.backend.builder.ins().isub(words, hi);
        let st1 = self.backend.builder.ins().iadd(st, step);
        let fits = self
            .backend
            .builder
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, st1, 0);
        let bumped = self.backend.builder.create_block();
        let full = self.backend.builder.create_block();
        self.backend
            .builder
            .ins()
            .brif(fits, bumped, &[], full, &[]);
        self.backend.builder.switch_to_block(bumped);
        self.backend.builder.def_var(sv, st1);
        let top = self.state_top(st);
        self.backend.builder.ins().jump(got, &[top.into()]);
        // It does not fit: the protocol below works on the memory word.
        self.backend.builder.switch_to_block(full);
        self.backend.builder.set_cold_block(full);
        let tl = self.tlab();
        self.store_tlab_state(tl, st);
        self.backend.builder.ins().jump(try_fast, &[tl.into()]);

        // Step 1: the generation (not FAILED); step 2: the add.
        self.backend.builder.switch_to_block(try_fast);
        let tl = self.backend.builder.block_params(try_fast)[0];
        let sa = self.tlab_state_addr(tl);
        let ga = self
            .backend
            .builder
            .ins()
            .iadd_imm_s(tl, i64::from(offload_abi::tlab::GENERATION_OFFSET));
        let g = self
            .backend
            .builder
            .ins()
            .atomic_load(types::I64, trusted(), ga);
        let failed = self.backend.builder.ins().ushr_imm_u(g, 63);
        self.backend.builder.ins().brif(
            failed,
            slow,
            &[g.into(), z64.into(), z32.into()],
            add,
            &[],
        );
        self.backend.builder.switch_to_block(add);
        let old = self.backend.builder.ins().atomic_rmw(
            types::I64,
            trusted(),
            AtomicRmwOp::Add,
            sa,
            words,
        );
        let (top, fits) = self.tlab_fits(old, words);
        let one = self.backend.builder.ins().iconst(types::I32, 1);
        let added = self.backend.builder.create_block();
        self.backend.builder.ins().brif(
            fits,
            added,
            &[],
            slow,
            &[g.into(), old.into(), one.into()],
        );
        // (On a slot that owns its TLAB the add never fits where the bump
        // did not; take the word from memory all the same.)
        self.backend.builder.switch_to_block(added);
        self.tlab_reload();
        self.backend.builder.ins().jump(got, &[top.into()]);

        // The object is at `top`: write its header (the memory is zero).
        self.backend.builder.switch_to_block(got);
        let at = self.backend.builder.block_params(got)[0];
        let off = self.backend.builder.ins().ishl_imm_u(at, 3);
        let addr = self.backend.builder.ins().iadd(heap, off);
        self.backend.builder.ins().store(trusted(), header, addr, 0);
        let r = self.backend.builder.ins().ireduce(types::I32, at);
        self.backend.builder.ins().jump(done, &[r.into()]);

        // The slow path (refill, wait, large objects, no TLABs; a poll).
        self.backend.builder.switch_to_block(slow);
        self.backend.builder.set_cold_block(slow);
        let p = self.backend.builder.block_params(slow).to_vec();
        let fr = self.backend.math["offload_alloc_slow"];
        let (ctx, _, _) = self.base_values();
        self.backend
            .builder
            .ins()
            .call(fr, &[ctx, slot, header, p[0], p[1], p[2]]);
        let at = self.slot_words();
        let res =
            self.backend
                .builder
                .ins()
                .load(types::I32, trusted(), at, offsets::SLOT_SLOW_RESULT);
        // The refill changed the memory word; the deopt exits below write
        // the kept state back, so it must be the new one first.
        self.tlab_reload();
        let failed = self.backend.builder.ins().icmp_imm_s(
            IntCC::Equal,
            res,
            i64::from(crate::cpu::rt::ALLOC_FAILED),
        );
        self.deopt_if(failed, bci, Reason::AllocationFailure);
        let sp = self.backend.builder.ins().icmp_imm_s(
            IntCC::Equal,
            res,
            i64::from(crate::cpu::rt::ALLOC_SAFEPOINT),
        );
        self.deopt_if(sp, bci, Reason::Safepoint);
        // A refill (or a large object) puts this workitem's objects
        // outside its part of the TLAB: it will not be reset.
        if let Some(nv) = self.backend.env.nursery {
            let off = self.nursery_off();
            self.backend.builder.def_var(nv, off);
        }
        self.backend.builder.ins().jump(done, &[res.into()]);

        self.backend.builder.switch_to_block(done);
        // An object of another kind lies outside the first kind's TLAB,
        // where the nursery cannot hand it back: this workitem will not be
        // reset, and the write barrier is the launch's from here on.
        if kind != Some(0)
            && let Some(nv) = self.backend.env.nursery
        {
            let off = self.nursery_off();
            self.backend.builder.def_var(nv, off);
        }
        self.backend.builder.block_params(done)[0]
    }
}
