//! The PTX slot loop around the kernel's body (module docs): a slot per
//! thread, each running its static grid-stride part of the range (slot `s`
//! of `S`: workitems `start + s`, `start + s + S`, …; consecutive threads
//! take consecutive workitems, so their accesses coalesce, and no claim
//! touches shared memory), the control word between workitems, and the
//! slot's exits with its unstarted rest.

use super::emit::RecordArith;
use super::*;
use crate::lower::Backend;
use offload_abi::gpu::{self, counter};
use offload_abi::record;

impl PtxWalker<'_> {
    /// Build the kernel; returns the sites whose records it can resume
    /// (none: it has no re-entry code).
    pub(super) fn build(&mut self) -> Result<BTreeSet<offload_ir::SiteId>, JitError> {
        let reentry = !self.opts.no_reentry && self.prog.has_reentry_points(self.cur.func);
        self.backend.reentry = reentry;
        for (n, ty) in [
            (SLOT, ".b64"),
            (HEAP, ".b64"),
            (CONTROL, ".b64"),
            (W, ".b64"),
            (HI, ".b64"),
            (STRIDE, ".b64"),
            (NREC, ".b64"),
            (TLAB, ".b64"),
            (LARGE, ".b64"),
            (EDEN, ".b64"),
            (DIRTY, ".b64"),
            (ONE8, ".b16"),
            (LIM, ".b64"),
            (POLLC, ".b32"),
        ] {
            self.named(n.into(), ty);
        }
        self.slot_prologue();
        let reduces = self.v.func(self.cur.func).ret.map(|t| t.kind());
        self.backend.reduces = reduces;
        if let Some(k) = reduces {
            self.reduce_prologue(k);
        }
        let captures = self.captures();
        let proven = self.proven();
        if let Some(pr) = &proven {
            self.unchecked_prologue(pr);
        }
        self.emit(format!("mov.u64 {NREC}, 0;"));
        self.emit(format!("mov.b32 {POLLC}, {};", POLL_WORK - 1));
        if let Some(si) = self.opts.safepoints {
            self.injection_stream(si);
        }
        self.kernel_locals(&captures);
        // On a launch's first run no slot has a record or a rest: none
        // reads the save area or its never-ran words.
        self.named(FRESHP.into(), ".pred");
        let fresh = self.ld_ctx(Cls::B64, offsets::FRESH);
        self.emit(format!("setp.ne.u64 {FRESHP}, {fresh}, 0;"));
        if reentry {
            self.record_first(&fresh);
        }
        // The slot's rest (or its part, on its first run), then done.
        self.rest_first();
        self.emit(format!("bra {L_DONE};"));
        // item: the next run of at most ITEMS_PER_POLL workitems, after a
        // poll of the control word.
        self.label(L_ITEM);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.s64 {p}, {W}, {HI};"));
        let exhausted = if reentry { L_MORE } else { L_DONE };
        self.emit(format!("@{p} bra {exhausted};"));
        let cw = self.t(Cls::B32);
        self.emit(format!("ld.relaxed.gpu.u32 {cw}, [{CONTROL}];"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ne.u32 {p}, {cw}, 0;"));
        // Off the common path: wait in place if asked, then stop if asked.
        let (l_asked, l_go) = (self.new_label(), self.new_label());
        self.emit(format!("@{p} bra {l_asked};"));
        self.label(&l_go);
        // lim = w + min(hi - w, ITEMS_PER_POLL strides), in unsigned
        // arithmetic: w < hi here, and hi - w may exceed i64::MAX.
        // (The run's length is computed here, once a run: a register kept
        // for it would be live across the whole body.)
        // (A reducing kernel's workitems each come back here from
        // `$reduce`: it has no run.)
        if reduces.is_none() {
            let (left, run) = (self.t(Cls::B64), self.t(Cls::B64));
            self.emit(format!("sub.s64 {left}, {HI}, {W};"));
            self.emit(format!("mul.lo.u64 {run}, {STRIDE}, {ITEMS_PER_POLL};"));
            self.emit(format!("min.u64 {left}, {left}, {run};"));
            self.emit(format!("add.s64 {LIM}, {W}, {left};"));
        }
        if proven.is_some() {
            self.emit(format!(
                "@{} bra {};",
                unchecked::FASTP,
                unchecked::L_BODY_FAST
            ));
        }
        self.label(L_BODY);
        self.workitem_entry(&captures);
        self.make_blocks();
        if !self.opts.quick {
            self.backend.loops =
                crate::cpu::opt::loop_predicates(self.v, self.cur.func, self.cur.analysis);
        }
        let first = self.cur.blocks[&0].clone();
        self.emit(format!("bra {first};"));
        let landings = if reentry {
            self.landing_in(crate::lower::reentry::Scope::Every, |w| w.kernel_body())?
        } else {
            self.kernel_body()?;
            Vec::new()
        };
        // next_item
        self.next_item(L_NEXT, L_BODY);
        if let Some(k) = reduces {
            self.reduce_block(k);
        }
        if let Some(pr) = proven {
            self.unchecked_body(pr, &captures)?;
        }
        // after_deopt
        self.label(L_AFTER);
        self.emit(format!("add.s64 {NREC}, {NREC}, 1;"));
        self.emit(format!("add.s64 {W}, {W}, {STRIDE};"));
        let per = self.ld_ctx(Cls::B64, offsets::RECORDS_PER_SLOT);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s64 {p}, {NREC}, {per};"));
        self.emit(format!("@{p} bra {L_ITEM};"));
        self.slot_exit(Some((W, HI)), offload_abi::exit::DEOPT);
        self.label(L_DONE);
        self.slot_exit(None, offload_abi::exit::DONE);
        if reduces.is_some() {
            self.label(super::reduce::L_LEAVES_FULL);
            self.slot_exit(Some((W, HI)), offload_abi::exit::VALUES);
        }
        // The control word was set before a workitem: wait in place if
        // asked; stop if asked (or still asked after waiting).
        self.label(&l_asked);
        if reduces.is_none() {
            // (A reducing kernel stops instead: `reduce.rs`.)
            self.wait_in_place(&cw);
        }
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ne.u32 {p}, {cw}, 0;"));
        self.emit(format!("@{p} bra {L_STOPPED};"));
        self.emit(format!("bra {l_go};"));
        self.label(L_STOPPED);
        self.slot_exit(Some((W, HI)), offload_abi::exit::STOPPED);
        if reentry {
            self.resume_blocks(&captures, &landings);
        }
        self.label("$idle");
        self.emit("ret;");
        Ok(landings.iter().map(|l| l.0).collect())
    }

    /// The slot's prologue: its thread (threads past the slots return),
    /// its slot, the launch's invariants in named registers, its TLAB.
    fn slot_prologue(&mut self) {
        let thread = self.thread_index();
        self.emit(format!(
            "ld.param.u64 {STRIDE}, [p_ctx+{}];",
            offsets::SLOTS
        ));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u64 {p}, {thread}, {STRIDE};"));
        self.emit(format!("@{p} bra $idle;"));
        let slot = self.rotated(&thread);
        self.emit(format!("mov.u64 {SLOT}, {slot};"));
        self.emit(format!(
            "ld.param.u64 {HEAP}, [p_ctx+{}];",
            offsets::HEAP_BASE
        ));
        self.emit(format!(
            "ld.param.u64 {CONTROL}, [p_ctx+{}];",
            offsets::CONTROL
        ));
        self.emit(format!("ld.param.u64 {EDEN}, [p_ctx+{}];", offsets::EDEN));
        self.emit(format!("ld.param.u64 {DIRTY}, [p_ctx+{}];", offsets::DIRTY));
        self.emit(format!("mov.b16 {ONE8}, 1;"));
        self.emit(format!(
            "ld.param.u64 {LARGE}, [p_ctx+{}];",
            offsets::LARGE_WORDS
        ));
        // The TLABs of this slot, one per kind of allocation: tlabs +
        // (slot / group) * 24 * kinds, or none.
        let group = self.ld_ctx(Cls::B64, offsets::TLAB_GROUP);
        let p = self.t(Cls::Pred);
        let l_tl = self.new_label();
        self.emit(format!("mov.u64 {TLAB}, 0;"));
        self.emit(format!("setp.eq.u64 {p}, {group}, 0;"));
        self.emit(format!("@{p} bra {l_tl};"));
        let base = self.ld_ctx(Cls::B64, offsets::TLABS);
        let q = self.t(Cls::B64);
        self.emit(format!("div.u64 {q}, {SLOT}, {group};"));
        self.emit(format!(
            "mad.lo.u64 {TLAB}, {q}, {}, {base};",
            offload_abi::gpu::TLAB_BYTES as usize * self.backend.alloc_kinds.len()
        ));
        self.label(&l_tl);
    }

    /// The captures, from the kernel's second parameter, each in a named
    /// register of its kind; those a launch may sum into from the block's
    /// row of the copies table (`DeviceCtx::copies`).
    fn captures(&mut self) -> Vec<String> {
        let f = self.v.func(self.cur.func);
        let summable = self.cur.analysis.summable.clone();
        if !summable.is_empty() {
            let (table, rows) = (
                self.ld_ctx(Cls::B64, offsets::COPIES),
                self.ld_ctx(Cls::B64, offsets::COPY_ROWS),
            );
            let (b32, b, row) = (self.t(Cls::B32), self.t(Cls::B64), self.t(Cls::B64));
            self.emit(format!("mov.u32 {b32}, %ctaid.x;"));
            self.emit(format!("cvt.u64.u32 {b}, {b32};"));
            self.emit(format!("rem.u64 {b}, {b}, {rows};"));
            self.emit(format!(
                "mad.lo.u64 {row}, {b}, {}, {table};",
                summable.len() * 16
            ));
            for (j, &p) in summable.iter().enumerate() {
                let e = self.t(Cls::B64);
                self.emit(format!("add.u64 {e}, {row}, {};", j * 16));
                self.backend.copy_entry.insert(p, e);
            }
        }
        let mut captures = Vec::new();
        for (i, p) in f.params().iter().enumerate().skip(1) {
            let raw = self.t(Cls::B64);
            match self.backend.copy_entry.get(&(i as u32)) {
                Some(e) => self.emit(format!("ld.global.u64 {raw}, [{e}];")),
                None => self.emit(format!("ld.param.u64 {raw}, [p_caps+{}];", (i - 1) * 8)),
            }
            let name = self.named(format!("%cap{i}"), reg_type(p.ty.kind()));
            self.unpack_raw(p.ty.kind(), &raw, &name);
            captures.push(name);
        }
        captures
    }

    /// The kernel frame's locals.
    fn kernel_locals(&mut self, captures: &[String]) {
        let f = self.v.func(self.cur.func);
        // A capture the kernel never assigns is its capture's register: no
        // copy per workitem, and a value ptxas reads from the parameters
        // instead of holding it in a register. (A re-entry restores such a
        // local to the value it has anyway: `def_var` skips it.)
        let assigned: BTreeSet<usize> = f
            .body
            .iter()
            .filter_map(|i| i.local_written().map(|l| l.index()))
            .collect();
        for (i, l) in f.locals.iter().enumerate() {
            let name = if (1..f.param_count as usize).contains(&i) && !assigned.contains(&i) {
                let c = captures[i - 1].clone();
                self.backend.fixed.insert(c.clone());
                c
            } else {
                Ptx::local_var(self, 0, i, l.ty.kind())
            };
            self.cur.locals.push(name);
        }
    }

    /// The state of injected safepoints (`si`), going on from the slot's
    /// last launch.
    fn injection_stream(&mut self, si: crate::SafepointInjection) {
        self.named(POLLS.into(), ".b64");
        match si.seed {
            Some(seed) => {
                let s0 = (seed | 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let t = self.t(Cls::B64);
                self.emit(format!(
                    "mul.lo.u64 {t}, {SLOT}, {:#x};",
                    0x2545_F491_4F6C_DD1Du64
                ));
                self.emit(format!("xor.b64 {t}, {t}, {s0:#x};"));
                self.emit(format!("or.b64 {POLLS}, {t}, 1;"));
            }
            None => self.emit(format!("mov.u64 {POLLS}, 0;")),
        }
        // The stream goes on from the slot's last launch, if it polled.
        let (at, saved, fresh) = (self.inject_addr(), self.t(Cls::B64), self.t(Cls::Pred));
        self.emit(format!("ld.u64 {saved}, [{at}];"));
        self.emit(format!("setp.eq.u64 {fresh}, {saved}, 0;"));
        self.emit(format!("selp.b64 {POLLS}, {POLLS}, {saved}, {fresh};"));
    }

    /// Go to `$resume` if the slot's part of the save area holds a record
    /// (never on a launch's first run, `fresh` set).
    fn record_first(&mut self, fresh: &str) {
        // A record the host left in the slot's part of the save area
        // is resumed first; the slot's unstarted rest waits in
        // never_ran (RESTP: its exits leave it there).
        self.named(RREC.into(), ".b64");
        self.named(RSITE.into(), ".b32");
        self.named(RESTP.into(), ".pred");
        let l_none = self.new_label();
        self.emit(format!("setp.ne.u64 {RESTP}, {fresh}, {fresh};"));
        self.emit(format!("@{FRESHP} bra {l_none};"));
        let area = self.ld_ctx(Cls::B64, offsets::SAVE_AREA);
        let words = self.ld_ctx(Cls::B64, offsets::RECORD_WORDS);
        let per = self.ld_ctx(Cls::B64, offsets::RECORDS_PER_SLOT);
        let mut arith = RecordArith::new(self);
        let idx = record::first(&mut arith, SLOT.into(), per);
        arith.address_into(RREC);
        record::address(&mut arith, area, words, idx);
        let sw = self.t(Cls::B64);
        self.emit(format!(
            "ld.u64 {sw}, [{RREC}+{}];",
            SaveLayout::SITE_WORD * 8
        ));
        self.emit(format!("setp.ne.s64 {RESTP}, {sw}, -1;"));
        self.emit(format!("cvt.u32.u64 {RSITE}, {sw};"));
        self.emit(format!("@{RESTP} bra {L_RESUME};"));
        self.label(&l_none);
    }

    /// Load the slot's unstarted rest into `w`, `hi` — its whole part of
    /// the range if it has not started it (a `(0, 0)` rest) — and run it
    /// if there is one (else fall through).
    fn rest_first(&mut self) {
        let l_part = self.new_label();
        self.emit(format!("@{FRESHP} bra {l_part};"));
        let nr = self.ld_ctx(Cls::B64, offsets::NEVER_RAN);
        let (at, slot) = (self.t(Cls::B64), self.slot_index());
        self.emit(format!(
            "mad.lo.u64 {at}, {slot}, {}, {nr};",
            gpu::NEVER_RAN_BYTES
        ));
        self.emit(format!("ld.u64 {W}, {};", mem(&at, gpu::NEVER_RAN_LO)));
        self.emit(format!("ld.u64 {HI}, {};", mem(&at, gpu::NEVER_RAN_HI)));
        let (both, fresh, l_have) = (self.t(Cls::B64), self.t(Cls::Pred), self.new_label());
        self.emit(format!("or.b64 {both}, {W}, {HI};"));
        self.emit(format!("setp.ne.u64 {fresh}, {both}, 0;"));
        self.emit(format!("@{fresh} bra {l_have};"));
        self.label(&l_part);
        let (start, slot) = (self.ld_ctx(Cls::B64, offsets::START), self.slot_index());
        self.emit(format!("add.s64 {W}, {start}, {slot};"));
        self.emit(format!("ld.param.u64 {HI}, [p_ctx+{}];", offsets::END));
        self.label(&l_have);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s64 {p}, {W}, {HI};"));
        self.emit(format!("@{p} bra {L_ITEM};"));
    }

    /// A workitem's entry: its index, the captures, zeroed locals.
    pub(super) fn workitem_entry(&mut self, captures: &[String]) {
        let f = self.v.func(self.cur.func);
        let l0 = self.cur.locals[0].clone();
        self.emit(format!("cvt.u32.u64 {l0}, {W};"));
        for i in 1..f.locals.len() {
            let var = self.cur.locals[i].clone();
            let k = f.locals[i].ty.kind();
            if i < f.param_count as usize {
                let c = captures[i - 1].clone();
                if var != c {
                    self.emit(format!("mov.{} {var}, {c};", mov_ty(k)));
                }
            } else {
                self.zero_into(k, &var);
            }
        }
    }

    /// `next:` a workitem of the copy of the body at `body` ended: count
    /// it, step to the slot's next one, and run it there while the run
    /// between polls lasts.
    pub(super) fn next_item(&mut self, next: &str, body: &str) {
        self.label(next);
        self.emit(format!("add.s64 {W}, {W}, {STRIDE};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s64 {p}, {W}, {LIM};"));
        self.emit(format!("@{p} bra {body};"));
        self.emit(format!("bra {L_ITEM};"));
    }

    /// Resuming the slot's record (module docs): `$resume` enters its
    /// workitem and dispatches on its site to the landing
    /// (`lower/reentry.rs`); when the workitem ends, `$more` empties the
    /// record and goes on with the slot's unstarted rest, then exits done.
    fn resume_blocks(&mut self, captures: &[String], landings: &[(offload_ir::SiteId, String)]) {
        self.label(L_RESUME);
        self.emit(format!(
            "ld.u64 {W}, [{RREC}+{}];",
            SaveLayout::WORKITEM_WORD * 8
        ));
        self.emit(format!("add.s64 {HI}, {W}, 1;"));
        self.emit(format!("mov.b64 {LIM}, {HI};"));
        self.workitem_entry(captures);
        let mut seen = BTreeSet::new();
        for (id, land) in landings {
            if seen.insert(*id) {
                let p = self.t(Cls::Pred);
                self.emit(format!("setp.eq.u32 {p}, {RSITE}, {};", id.0));
                self.emit(format!("@{p} bra {land};"));
            }
        }
        self.slot_exit(Some((W, HI)), offload_abi::exit::NO_LANDING);
        self.label(L_MORE);
        self.emit(format!("@!{RESTP} bra {L_DONE};"));
        if self.reduces().is_some() {
            self.not_synced();
        }
        let empty = self.t(Cls::B64);
        self.emit(format!("mov.b64 {empty}, -1;"));
        self.emit(format!(
            "st.u64 [{RREC}+{}], {empty};",
            SaveLayout::SITE_WORD * 8
        ));
        self.emit(format!("setp.ne.s64 {RESTP}, {W}, {W};"));
        self.rest_first();
        self.emit(format!("bra {L_DONE};"));
    }

    /// `x` in a `b64` register (immediates are moved into one).
    pub(super) fn reg64(&mut self, x: &str) -> String {
        if x.starts_with('%') {
            return x.to_string();
        }
        let r = self.t(Cls::B64);
        self.emit(format!("mov.b64 {r}, {x};"));
        r
    }

    /// Raw 64-bit slot `raw` as a value of kind `k`, into `dst`.
    pub(super) fn unpack_raw(&mut self, k: Kind, raw: &str, dst: &str) {
        match k {
            Kind::I64 => self.emit(format!("mov.b64 {dst}, {raw};")),
            Kind::I32 | Kind::Ref => self.emit(format!("cvt.u32.u64 {dst}, {raw};")),
            Kind::F32 => {
                let lo = self.t(Cls::B32);
                self.emit(format!("cvt.u32.u64 {lo}, {raw};"));
                self.emit(format!("mov.b32 {dst}, {lo};"));
            }
            Kind::F64 => self.emit(format!("mov.b64 {dst}, {raw};")),
        }
    }

    /// A value of kind `k` as a raw 64-bit slot.
    pub(super) fn pack_raw(&mut self, k: Kind, x: &str) -> String {
        let r = self.t(Cls::B64);
        match k {
            Kind::I64 | Kind::F64 => self.emit(format!("mov.b64 {r}, {x};")),
            Kind::I32 | Kind::Ref => self.emit(format!("cvt.u64.u32 {r}, {x};")),
            Kind::F32 => {
                let b = self.t(Cls::B32);
                self.emit(format!("mov.b32 {b}, {x};"));
                self.emit(format!("cvt.u64.u32 {r}, {b};"));
            }
        }
        r
    }

    /// Store this slot's never-ran rest (`rest`, `lo` and `hi`; none for a
    /// slot that finished: its code says it has none,
    /// `DeviceCtx::never_ran`), count the slot if it leaves work behind,
    /// store its exit byte, and return.
    pub(super) fn slot_exit(&mut self, rest: Option<(&str, &str)>, code: u32) {
        debug_assert_eq!(rest.is_none(), code == offload_abi::exit::DONE);
        let slot = self.slot_index();
        if let Some((lo, hi)) = rest {
            // An empty rest is stored as none: `(0, 0)` would read as a
            // part not started.
            let (nr_lo, nr_hi, p) = (self.t(Cls::B64), self.t(Cls::B64), self.t(Cls::Pred));
            let (none_lo, none_hi) = gpu::NEVER_RAN_NONE;
            self.emit(format!("setp.lt.s64 {p}, {lo}, {hi};"));
            self.emit(format!("selp.b64 {nr_lo}, {lo}, {none_lo}, {p};"));
            self.emit(format!("selp.b64 {nr_hi}, {hi}, {none_hi}, {p};"));
            // A slot resuming its record leaves its rest where it is.
            let nr = self.ld_ctx(Cls::B64, offsets::NEVER_RAN);
            let at = self.t(Cls::B64);
            self.emit(format!(
                "mad.lo.u64 {at}, {slot}, {}, {nr};",
                gpu::NEVER_RAN_BYTES
            ));
            let guard = if self.backend.reentry {
                format!("@!{RESTP} ")
            } else {
                String::new()
            };
            self.emit(format!(
                "{guard}st.u64 {}, {nr_lo};",
                mem(&at, gpu::NEVER_RAN_LO)
            ));
            self.emit(format!(
                "{guard}st.u64 {}, {nr_hi};",
                mem(&at, gpu::NEVER_RAN_HI)
            ));
            let stats = self.ld_ctx(Cls::B64, offsets::STATS);
            self.emit(format!(
                "red.add.u64 [{stats}+{}], 1;",
                counter::byte(counter::SLOTS_STOPPED)
            ));
        }
        // The exit: the code's byte with release semantics (the slot's
        // writes before it; the host counts a slot with a code as gone).
        // No atomic: a run in which every slot finishes touches no shared
        // word, and a warp's exits share one sector.
        if self.reduces().is_some() {
            self.leaves_at_exit(&slot);
        }
        let (ex, at) = (self.ld_ctx(Cls::B64, offsets::EXITS), self.t(Cls::B64));
        self.emit(format!("add.u64 {at}, {ex}, {slot};"));
        let c = self.t(Cls::B32);
        self.emit(format!("mov.b32 {c}, {:#x};", gpu::exit_byte(code)));
        self.emit(format!("st.release.sys.u8 [{at}], {c};"));
        self.emit("ret;");
    }

    /// The address of this slot's injected-safepoint state.
    pub(super) fn inject_addr(&mut self) -> String {
        let (base, slot) = (self.ld_ctx(Cls::B64, offsets::INJECT), self.slot_index());
        let at = self.t(Cls::B64);
        self.emit(format!(
            "mad.lo.u64 {at}, {slot}, {}, {base};",
            gpu::INJECT_BYTES
        ));
        at
    }

    /// The slot's index, derived again from the special registers: the
    /// prologue's `%slot` dies there, so that no register holds it while
    /// the slot runs (the exits and deopts that need it are cold).
    pub(super) fn slot_index(&mut self) -> String {
        let thread = self.thread_index();
        self.rotated(&thread)
    }

    /// The thread's index in the grid.
    fn thread_index(&mut self) -> String {
        let (a, b, c) = (self.t(Cls::B32), self.t(Cls::B32), self.t(Cls::B32));
        let (t, thread) = (self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("mov.u32 {a}, %ctaid.x;"));
        self.emit(format!("mov.u32 {b}, %ntid.x;"));
        self.emit(format!("mov.u32 {c}, %tid.x;"));
        self.emit(format!("cvt.u64.u32 {t}, {c};"));
        self.emit(format!("mad.wide.u32 {thread}, {a}, {b}, {t};"));
        thread
    }

    /// The slot thread `thread` (below the slot count) runs:
    /// `(thread + rotate) mod slots` ([`offsets::ROTATE`]).
    fn rotated(&mut self, thread: &str) -> String {
        let (rot, n) = (
            self.ld_ctx(Cls::B64, offsets::ROTATE),
            self.ld_ctx(Cls::B64, offsets::SLOTS),
        );
        let (slot, wrap, p) = (self.t(Cls::B64), self.t(Cls::B64), self.t(Cls::Pred));
        self.emit(format!("add.u64 {slot}, {thread}, {rot};"));
        self.emit(format!("sub.u64 {wrap}, {slot}, {n};"));
        self.emit(format!("setp.ge.u64 {p}, {slot}, {n};"));
        self.emit(format!("selp.b64 {slot}, {wrap}, {slot}, {p};"));
        slot
    }

    pub(super) fn ld_ctx(&mut self, c: Cls, off: u32) -> String {
        let r = self.t(c);
        self.emit(format!("ld.param.u64 {r}, [p_ctx+{off}];"));
        r
    }
}
