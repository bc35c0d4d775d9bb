//! The walker's primitives in PTX text ([`Backend`] for [`Ptx`]).

use super::*;
use crate::Injection;
use crate::lower::plan::TypeTest;
use crate::lower::{Backend, BinOp, CmpOp, Const, Exit, UnOp};
use offload_abi::record;
use offload_ir::Type;

/// The save-record formula (`offload_abi::record`) in PTX: each operation
/// into a fresh temporary, or the last one into a named register.
pub(super) struct RecordArith<'a, 'b> {
    lp: &'a mut PtxWalker<'b>,
    into: Option<&'static str>,
}

impl<'a, 'b> RecordArith<'a, 'b> {
    pub(super) fn new(lp: &'a mut PtxWalker<'b>) -> Self {
        RecordArith { lp, into: None }
    }

    /// Put the record's address ([`record::address`]'s result) into
    /// register `r` instead of a temporary.
    pub(super) fn address_into(&mut self, r: &'static str) {
        self.into = Some(r);
    }

    fn dest(&mut self) -> String {
        self.lp.t(Cls::B64)
    }
}

impl record::Arith for RecordArith<'_, '_> {
    type V = String;
    fn mul(&mut self, a: String, b: String) -> String {
        let d = self.dest();
        self.lp.emit(format!("mul.lo.u64 {d}, {a}, {b};"));
        d
    }
    fn mul_add(&mut self, a: String, b: String, c: impl FnOnce(&mut Self) -> String) -> String {
        let c = c(self);
        let d = self.dest();
        self.lp.emit(format!("mad.lo.u64 {d}, {a}, {b}, {c};"));
        d
    }
    fn mul_imm_add(&mut self, a: String, k: i64, c: String) -> String {
        let d = match self.into.take() {
            Some(r) => r.to_string(),
            None => self.dest(),
        };
        self.lp.emit(format!("mad.lo.u64 {d}, {a}, {k}, {c};"));
        d
    }
}

impl PtxWalker<'_> {
    /// One instruction line.
    pub(super) fn emit(&mut self, line: impl AsRef<str>) {
        self.backend.code.push('\t');
        self.backend.code.push_str(line.as_ref());
        self.backend.code.push('\n');
    }

    pub(super) fn label(&mut self, l: &str) {
        self.backend.code.push_str(l);
        self.backend.code.push_str(":\n");
    }

    pub(super) fn new_label(&mut self) -> String {
        self.backend.labels += 1;
        format!("$L{}", self.backend.labels)
    }

    /// A fresh temporary register of class `c`.
    pub(super) fn t(&mut self, c: Cls) -> String {
        let n = &mut self.backend.next[c as usize];
        *n += 1;
        format!("{}{}", TEMP_CLASSES[c as usize].1, *n - 1)
    }

    /// Declare the named register `name` of type `ty`.
    pub(super) fn named(&mut self, name: String, ty: &'static str) -> String {
        self.backend.regs.push((name.clone(), ty));
        name
    }

    /// `setp` then `selp` into a fresh 0/1 `b32`.
    pub(super) fn setp_i32(&mut self, cmp: &str, a: &str, b: &str) -> String {
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.{cmp} {p}, {a}, {b};"));
        let r = self.t(Cls::B32);
        self.emit(format!("selp.b32 {r}, 1, 0, {p};"));
        r
    }

    /// Zero `dst`, a register of kind `k`.
    pub(super) fn zero_into(&mut self, k: Kind, dst: &str) {
        let z = const_text(Const::zero(k));
        self.emit(format!("mov.{} {dst}, {z};", mov_ty(k)));
    }

    /// If the control word `cw` (a `b32` register) asks slots to wait in
    /// place: fence this slot's writes, count it parked, spin until the bit
    /// clears (reloading `cw` with acquire: what the host wrote meanwhile
    /// is visible after), and count it out again. Falls through with `cw`
    /// current.
    pub(super) fn wait_in_place(&mut self, cw: &str) {
        let skip = self.new_label();
        let spin = self.new_label();
        let t = self.t(Cls::B32);
        let p = self.t(Cls::Pred);
        self.emit(format!(
            "and.b32 {t}, {cw}, {};",
            offload_abi::control::WAIT
        ));
        self.emit(format!("setp.eq.u32 {p}, {t}, 0;"));
        self.emit(format!("@{p} bra {skip};"));
        let pk = self.t(Cls::B64);
        self.emit(format!("ld.param.u64 {pk}, [p_ctx+{}];", offsets::PARKED));
        self.emit("fence.sc.sys;");
        self.emit(format!("red.add.u32 [{pk}], 1;"));
        self.label(&spin);
        self.emit("nanosleep.u32 1000;");
        self.emit(format!("ld.acquire.sys.u32 {cw}, [{CONTROL}];"));
        self.emit(format!(
            "and.b32 {t}, {cw}, {};",
            offload_abi::control::WAIT
        ));
        self.emit(format!("setp.ne.u32 {p}, {t}, 0;"));
        self.emit(format!("@{p} bra {spin};"));
        self.emit(format!("red.add.u32 [{pk}], 0xFFFFFFFF;"));
        self.label(&skip);
    }

    /// Mark the heap chunk of the address `at` (a register, or
    /// `register+offset`) in the dirty map: the host fetches exactly the
    /// chunks a kernel wrote (`offload_heap::resident`).
    pub(super) fn mark_dirty(&mut self, at: &str) {
        let mut parts = at.split('+');
        let r = parts.next().unwrap_or(at);
        if self.backend.premarked.contains(r) {
            return;
        }
        let a = self.t(Cls::B64);
        let off: i64 = parts.map(|p| p.trim().parse::<i64>().unwrap_or(0)).sum();
        let shift = offload_heap::resident::CHUNK_SHIFT;
        if off == 0 {
            self.emit(format!("shr.u64 {a}, {r}, {shift};"));
        } else {
            self.emit(format!("add.u64 {a}, {r}, {off};"));
            self.emit(format!("shr.u64 {a}, {a}, {shift};"));
        }
        self.emit(format!("add.u64 {a}, {a}, {DIRTY};"));
        self.emit(format!("st.u8 [{a}], {ONE8};"));
    }

    pub(super) fn obj_addr(&mut self, r: &str) -> String {
        let a = self.t(Cls::B64);
        self.emit(format!("mul.wide.u32 {a}, {r}, 8;"));
        self.emit(format!("add.u64 {a}, {a}, {HEAP};"));
        a
    }

    /// Whether the class id `tag` is one of `ids`, as a predicate.
    fn tag_in(&mut self, tag: &str, ids: &[u32]) -> String {
        let acc = self.t(Cls::Pred);
        self.emit(format!("setp.ne.u32 {acc}, {tag}, {tag};"));
        for id in ids {
            self.emit(format!("setp.eq.or.u32 {acc}, {tag}, {id}, {acc};"));
        }
        acc
    }

    /// The class id in the header of the object `r` (`b32`), the load
    /// marked [`DISPATCH_HEADER`]; `r` may be null.
    pub(super) fn header_tag(&mut self, r: &str) -> String {
        let tag = self.t(Cls::B32);
        let base = self.obj_addr(r);
        self.emit(format!("ld.u32 {tag}, [{base}]; // {DISPATCH_HEADER}"));
        tag
    }

    /// The class id of the object `r` (`b32`): the tag of its page
    /// (`offload_abi::pages`: one load from the page table, which every
    /// thread of a warp reads in the same few lines), or its header's when
    /// the page is mixed (a load under a guard) or the options say so —
    /// the loads marked [`DISPATCH_PAGE`] and [`DISPATCH_HEADER`] for the
    /// virtual GPU's counters. `r` may be null (heap word 0 is reserved and
    /// readable).
    pub(super) fn class_of(&mut self, r: &str) -> String {
        if !self.opts.dispatch.by_address(true) {
            return self.header_tag(r);
        }
        let tag = self.t(Cls::B32);
        let table = self.ld_ctx(Cls::B64, offsets::PAGES);
        let page = self.t(Cls::B32);
        self.emit(format!(
            "shr.u32 {page}, {r}, {};",
            offload_abi::pages::PAGE_SHIFT
        ));
        let at = self.t(Cls::B64);
        self.emit(format!(
            "mad.wide.u32 {at}, {page}, {}, {table};",
            offload_abi::pages::TAG_BYTES
        ));
        self.emit(format!("ld.global.u32 {tag}, [{at}]; // {DISPATCH_PAGE}"));
        let mixed = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s32 {mixed}, {tag}, 0;"));
        let base = self.t(Cls::B64);
        self.emit(format!("@{mixed} mad.wide.u32 {base}, {r}, 8, {HEAP};"));
        self.emit(format!(
            "@{mixed} ld.u32 {tag}, [{base}]; // {DISPATCH_HEADER}"
        ));
        tag
    }

    /// Whether `r` (which may be null: heap word 0 is reserved and
    /// readable; the caller masks) is an instance of `ty`, as a predicate:
    /// a class by [`PtxWalker::class_of`], an array type from the header.
    fn type_test(&mut self, r: &str, ty: Type) -> String {
        let test = plan::type_test(self.prog, ty);
        let tag = if let TypeTest::Classes(_) = &test {
            self.class_of(r)
        } else {
            let base = self.obj_addr(r);
            let tag = self.t(Cls::B32);
            self.emit(format!("ld.u32 {tag}, [{base}];"));
            tag
        };
        if let TypeTest::Classes(ids) = &test {
            return self.tag_in(&tag, ids);
        }
        let acc = self.t(Cls::Pred);
        match test {
            TypeTest::Tag(want) => self.emit(format!("setp.eq.u32 {acc}, {tag}, {want};")),
            TypeTest::Always => self.emit(format!("setp.eq.u32 {acc}, {tag}, {tag};")),
            _ => self.emit(format!("setp.ne.u32 {acc}, {tag}, {tag};")),
        }
        acc
    }

    /// The deopt exit `exit`, at the current point of the code: the record
    /// (values, then a fence, then the site word), then on to the next
    /// workitem (or out of the slot, for a safepoint).
    fn deopt_exit(&mut self, exit: Exit<String>) {
        self.emit(format!(
            "// deopt: site {} ({}) at bci {}",
            exit.site.0,
            exit.reason.name(),
            exit.bci
        ));
        let area = self.ld_ctx(Cls::B64, offsets::SAVE_AREA);
        let words = self.ld_ctx(Cls::B64, offsets::RECORD_WORDS);
        let per = self.ld_ctx(Cls::B64, offsets::RECORDS_PER_SLOT);
        let slot = self.slot_index();
        let mut arith = RecordArith::new(self);
        let index = record::index(&mut arith, slot, per, |_| NREC.into());
        let rec = record::address(&mut arith, area, words, index);
        self.emit(format!(
            "st.u64 [{rec}+{}], {W};",
            SaveLayout::WORKITEM_WORD * 8
        ));
        for s in &exit.slots {
            let raw = self.pack_raw(s.kind, &s.var);
            self.emit(format!("st.u64 [{rec}+{}], {raw};", s.word * 8));
        }
        // The values before the site word: a reader that sees the word sees
        // the frame.
        self.emit("fence.acq_rel.gpu;");
        let sw = self.reg64(&format!(
            "{:#x}",
            SaveLayout::site_word(exit.site, exit.reason)
        ));
        self.emit(format!(
            "st.relaxed.gpu.u64 [{rec}+{}], {sw};",
            SaveLayout::SITE_WORD * 8
        ));
        let stats = self.ld_ctx(Cls::B64, offsets::STATS);
        self.emit(format!(
            "red.add.u64 {}, 1;",
            mem(
                &stats,
                offload_abi::gpu::counter::byte(offload_abi::gpu::counter::DEOPTS) as i32
            )
        ));
        if exit.reason == Reason::Safepoint {
            let w1 = self.t(Cls::B64);
            self.emit(format!("add.s64 {w1}, {W}, {STRIDE};"));
            self.slot_exit(Some((&w1, HI)), offload_abi::exit::DEOPT);
        } else {
            self.emit(format!("bra {L_AFTER};"));
        }
    }

    /// A transcendental: a call into the math library ([`ptxlib`]).
    fn transcendental(&mut self, r: ptxlib::Routine, k: Kind, args: Vec<String>) -> String {
        self.backend.math.insert(r.name);
        let mut args = args;
        if let Some(sel) = r.selector {
            args.push(sel.to_string());
        }
        let res = self.t(cls(k));
        self.emit(format!("call ({res}), {}, ({});", r.name, args.join(", ")));
        res
    }

    /// `a / b` or `a % b` (`rem`) of kind `k`, `b` not zero: `MIN / -1`
    /// wraps (and `MIN % -1` is 0) instead of overflowing.
    fn int_div(&mut self, k: Kind, rem: bool, a: &str, b: &str) -> String {
        let ty = if k == Kind::I64 { "s64" } else { "s32" };
        let m1 = self.t(Cls::Pred);
        self.emit(format!("setp.eq.{ty} {m1}, {b}, -1;"));
        let safe = self.t(cls(k));
        self.emit(format!("selp.{ty} {safe}, 1, {b}, {m1};"));
        let r = self.t(cls(k));
        if rem {
            self.emit(format!("rem.{ty} {r}, {a}, {safe};"));
            self.emit(format!("selp.{ty} {r}, 0, {r}, {m1};"));
        } else {
            self.emit(format!("div.{ty} {r}, {a}, {safe};"));
            let n = self.t(cls(k));
            self.emit(format!("neg.{ty} {n}, {a};"));
            self.emit(format!("selp.{ty} {r}, {n}, {r}, {m1};"));
        }
        r
    }

    /// A shift of `a` by `b` masked to the width (`count & 31` or `& 63`),
    /// as the bytecode does.
    fn shift(&mut self, k: Kind, op: &str, a: &str, b: &str) -> String {
        let mask = if k == Kind::I64 { 63 } else { 31 };
        let n = self.t(Cls::B32);
        if k == Kind::I64 {
            self.emit(format!("cvt.u32.u64 {n}, {b};"));
            self.emit(format!("and.b32 {n}, {n}, {mask};"));
        } else {
            self.emit(format!("and.b32 {n}, {b}, {mask};"));
        }
        let r = self.t(cls(k));
        self.emit(format!("{op} {r}, {a}, {n};"));
        r
    }

    /// `op` on the bits of float `a` with `mask` (sign flips and clears).
    fn flip_bits(&mut self, k: Kind, op: &str, mask: &str, a: &str) -> String {
        let (bits, bc) = if k == Kind::F32 {
            ("b32", Cls::B32)
        } else {
            ("b64", Cls::B64)
        };
        let r = self.t(cls(k));
        if a.starts_with('%') {
            // A bit-size instruction takes registers of any type of its
            // size: no moves through an integer register.
            self.emit(format!("{op}.{bits} {r}, {a}, {mask};"));
            return r;
        }
        let i = self.t(bc);
        self.emit(format!("mov.{bits} {i}, {a};"));
        self.emit(format!("{op}.{bits} {i}, {i}, {mask};"));
        self.emit(format!("mov.{bits} {r}, {i};"));
        r
    }

    /// `op` of `args` into a fresh register of kind `k`.
    fn op(&mut self, k: Kind, op: &str, args: &[&str]) -> String {
        let r = self.t(cls(k));
        self.emit(format!("{op} {r}, {};", args.join(", ")));
        r
    }
}

/// A constant's PTX text.
fn const_text(c: Const) -> String {
    match c {
        Const::I32(v) => format!("{v}"),
        Const::I64(v) => format!("{v}"),
        Const::F32(bits) => format!("0f{bits:08X}"),
        Const::F64(bits) => format!("0d{bits:016X}"),
        Const::Null => "0".into(),
    }
}

/// The type suffix of kind `k` in integer (`s32`, `s64`), float (`f32`,
/// `f64`) or reference (`u32`) instructions.
fn arith_ty(k: Kind) -> &'static str {
    match k {
        Kind::I32 => "s32",
        Kind::I64 => "s64",
        Kind::F32 => "f32",
        Kind::F64 => "f64",
        Kind::Ref => "u32",
    }
}

impl Backend for Ptx {
    type Var = String;
    type Val = String;
    type Block = String;
    /// The continuation's label and the register that holds the result,
    /// with its kind.
    type Join = (String, Option<(String, Kind)>);

    fn reuses_calls(w: &PtxWalker<'_>) -> bool {
        // The unchecked copy has no landings (`unchecked.rs`).
        w.backend.copy == 1
    }

    fn known_compare(w: &PtxWalker<'_>, bci: Bci) -> Option<i32> {
        w.backend.known.get(&bci).copied()
    }

    fn local_var(w: &mut PtxWalker<'_>, instance: u32, index: usize, kind: Kind) -> String {
        w.named(format!("%l{instance}_{index}"), reg_type(kind))
    }

    fn stack_var(w: &mut PtxWalker<'_>, instance: u32, depth: usize, kind: Kind) -> String {
        let suffix = match kind {
            Kind::I32 => "i",
            Kind::Ref => "r",
            Kind::I64 => "l",
            Kind::F32 => "f",
            Kind::F64 => "d",
        };
        w.named(format!("%s{instance}_{depth}{suffix}"), reg_type(kind))
    }

    fn use_var(_w: &mut PtxWalker<'_>, var: &String, _kind: Kind) -> String {
        // Valid until the register is assigned again (see `stable`).
        var.clone()
    }

    fn def_var(w: &mut PtxWalker<'_>, var: &String, kind: Kind, x: String) {
        // Only a re-entry assigns a never-assigned capture's local: with the
        // value it has (`Ptx::fixed`).
        if *var != x && !w.backend.fixed.contains(var) {
            w.emit(format!("mov.{} {var}, {x};", mov_ty(kind)));
        }
    }

    fn stable(w: &mut PtxWalker<'_>, kind: Kind, x: String) -> String {
        let t = w.t(cls(kind));
        w.emit(format!("mov.{} {t}, {x};", mov_ty(kind)));
        t
    }

    fn constant(_w: &mut PtxWalker<'_>, c: Const) -> String {
        const_text(c)
    }

    fn increment(w: &mut PtxWalker<'_>, var: &String, kind: Kind, delta: i32) {
        let ty = if kind == Kind::I64 { "s64" } else { "s32" };
        w.emit(format!("add.{ty} {var}, {var}, {delta};"));
    }

    fn leader_block(w: &mut PtxWalker<'_>, instance: u32, bci: Bci) -> String {
        let copy = if w.backend.copy == 0 { "B" } else { "U" };
        format!("${copy}{instance}_{bci}")
    }

    fn new_block(w: &mut PtxWalker<'_>) -> String {
        w.new_label()
    }

    fn switch_to(w: &mut PtxWalker<'_>, b: &String) {
        w.label(b);
    }

    fn enter_block(w: &mut PtxWalker<'_>, b: &String, _terminated: bool) {
        // Code falls into a label.
        w.label(b);
    }

    fn jump(w: &mut PtxWalker<'_>, b: &String) {
        w.emit(format!("bra {b};"));
    }

    fn cond_branch(
        w: &mut PtxWalker<'_>,
        x: String,
        jumps_on_nonzero: bool,
        dest: &String,
        fall: &String,
    ) {
        let p = w.t(Cls::Pred);
        let cc = if jumps_on_nonzero { "ne" } else { "eq" };
        w.emit(format!("setp.{cc}.u32 {p}, {x}, 0;"));
        w.emit(format!("@{p} bra {dest};"));
        w.emit(format!("bra {fall};"));
    }

    fn branch_if(
        w: &mut PtxWalker<'_>,
        x: String,
        jumps_on_nonzero: bool,
        when: bool,
        to: &String,
    ) {
        // `p`: the branch would jump.
        let p = w.t(Cls::Pred);
        let cc = if jumps_on_nonzero { "ne" } else { "eq" };
        w.emit(format!("setp.{cc}.u32 {p}, {x}, 0;"));
        let neg = if when { "" } else { "!" };
        w.emit(format!("@{neg}{p} bra {to};"));
    }

    fn branch_on(w: &mut PtxWalker<'_>, cond: String, when: bool, to: &String) {
        let neg = if when { "" } else { "!" };
        w.emit(format!("@{neg}{cond} bra {to};"));
    }

    fn guard(w: &mut PtxWalker<'_>, cond: String) -> String {
        let next = w.new_label();
        w.emit(format!("@!{cond} bra {next};"));
        next
    }

    fn ret_kernel(w: &mut PtxWalker<'_>, value: Option<Self::Val>) {
        match (value, w.reduces()) {
            (Some(v), Some(k)) => {
                w.emit(format!("mov.{} {}, {v};", mov_ty(k), super::reduce::RV));
                w.emit(format!("bra {};", super::reduce::L_REDUCE));
            }
            _ => w.emit(format!("bra {};", w.backend.next_label)),
        }
    }

    fn join(w: &mut PtxWalker<'_>, ret: Option<Kind>, virtual_call: bool, n: u32) -> Self::Join {
        let label = w.new_label();
        let prefix = if virtual_call { "%vret" } else { "%ret" };
        let result = ret.map(|k| (w.named(format!("{prefix}{n}"), reg_type(k)), k));
        (label, result)
    }

    fn jump_join(w: &mut PtxWalker<'_>, j: &Self::Join, result: Option<String>) {
        let (label, reg) = j;
        if let (Some((dst, k)), Some(x)) = (reg, result) {
            w.emit(format!("mov.{} {dst}, {x};", mov_ty(*k)));
        }
        w.emit(format!("bra {label};"));
    }

    fn enter_join(w: &mut PtxWalker<'_>, j: &Self::Join) -> Option<String> {
        w.label(&j.0);
        j.1.as_ref().map(|(r, _)| r.clone())
    }

    fn deopt(w: &mut PtxWalker<'_>, exit: Exit<String>) {
        w.deopt_exit(exit);
    }

    fn deopt_if(w: &mut PtxWalker<'_>, cond: String, exit: Exit<String>) {
        let cont = w.new_label();
        w.emit(format!("@!{cond} bra {cont};"));
        w.deopt_exit(exit);
        w.label(&cont);
    }

    fn safepoint_requested(w: &mut PtxWalker<'_>, work: u32) -> String {
        let p = w.t(Cls::Pred);
        let done = w.new_label();
        if w.opts.safepoints.is_none() {
            // Once POLL_WORK of work is done (false until then).
            let work = work.clamp(1, POLL_WORK);
            w.emit(format!("add.s32 {POLLC}, {POLLC}, -{work};"));
            w.emit(format!("setp.lt.s32 {p}, {POLLC}, 0;"));
            w.emit(format!("@!{p} bra {done};"));
            w.emit(format!("mov.b32 {POLLC}, {};", POLL_WORK - 1));
        }
        let cw = w.t(Cls::B32);
        w.emit(format!("ld.relaxed.gpu.u32 {cw}, [{CONTROL}];"));
        w.emit(format!("setp.ne.u32 {p}, {cw}, 0;"));
        // Off the common path: wait in place if asked, then see whether a
        // stop is asked.
        w.emit(format!("@!{p} bra {done};"));
        if w.reduces().is_none() {
            w.wait_in_place(&cw);
            w.emit(format!(
                "and.b32 {cw}, {cw}, {};",
                offload_abi::control::SAFEPOINT
            ));
        }
        // (A reducing kernel stops at every request: `reduce.rs`.)
        w.emit(format!("setp.ne.u32 {p}, {cw}, 0;"));
        w.label(&done);
        if let Some(si) = w.opts.safepoints {
            if si.seed.is_some() {
                let a = w.t(Cls::B64);
                w.emit(format!("shl.b64 {a}, {POLLS}, 13;"));
                w.emit(format!("xor.b64 {POLLS}, {POLLS}, {a};"));
                w.emit(format!("shr.u64 {a}, {POLLS}, 7;"));
                w.emit(format!("xor.b64 {POLLS}, {POLLS}, {a};"));
                w.emit(format!("shl.b64 {a}, {POLLS}, 17;"));
                w.emit(format!("xor.b64 {POLLS}, {POLLS}, {a};"));
            } else {
                w.emit(format!("add.u64 {POLLS}, {POLLS}, 1;"));
            }
            let at = w.inject_addr();
            w.emit(format!("st.u64 [{at}], {POLLS};"));
            let r = w.t(Cls::B64);
            w.emit(format!("rem.u64 {r}, {POLLS}, {};", si.every.max(1)));
            w.emit(format!("setp.eq.or.u64 {p}, {r}, 0, {p};"));
        }
        p
    }

    fn reentry_value(w: &mut PtxWalker<'_>, word: u32, kind: Kind) -> String {
        let raw = w.t(Cls::B64);
        w.emit(format!("ld.u64 {raw}, [{RREC}+{}];", word * 8));
        let dst = w.t(cls(kind));
        w.unpack_raw(kind, &raw, &dst);
        dst
    }

    fn injected(w: &mut PtxWalker<'_>, inj: Injection) -> String {
        let m = w.t(Cls::B64);
        w.emit(format!("rem.s64 {m}, {W}, {};", inj.modulus));
        let p = w.t(Cls::Pred);
        w.emit(format!("setp.eq.s64 {p}, {m}, {};", inj.remainder));
        p
    }

    fn is_null(w: &mut PtxWalker<'_>, r: String) -> String {
        let p = w.t(Cls::Pred);
        w.emit(format!("setp.eq.u32 {p}, {r}, 0;"));
        p
    }

    fn is_zero(w: &mut PtxWalker<'_>, k: Kind, x: String) -> String {
        let p = w.t(Cls::Pred);
        w.emit(format!("setp.eq.{} {p}, {x}, 0;", arith_ty(k)));
        p
    }

    fn is_negative(w: &mut PtxWalker<'_>, x: String) -> String {
        let p = w.t(Cls::Pred);
        w.emit(format!("setp.lt.s32 {p}, {x}, 0;"));
        p
    }

    fn host_math(w: &mut PtxWalker<'_>, op: UnOp, k: Kind, a: String) -> Option<String> {
        // Sine and cosine beyond the device's single-word reduction go to
        // the host (`devlimit`).
        if !matches!(op, UnOp::Sin | UnOp::Cos) {
            return None;
        }
        let ty = arith_ty(k);
        let (limit, inf) = if k == Kind::F64 {
            (
                format!("0d{:016X}", ptxlib::TRIG_HOST_F64.to_bits()),
                "0d7FF0000000000000".to_string(),
            )
        } else {
            (
                format!("0f{:08X}", ptxlib::TRIG_HOST_F32.to_bits()),
                "0f7F800000".to_string(),
            )
        };
        let abs = w.t(cls(k));
        w.emit(format!("abs.{ty} {abs}, {a};"));
        let (big, finite) = (w.t(Cls::Pred), w.t(Cls::Pred));
        w.emit(format!("setp.ge.{ty} {big}, {abs}, {limit};"));
        w.emit(format!("setp.lt.{ty} {finite}, {abs}, {inf};"));
        w.emit(format!("and.pred {big}, {big}, {finite};"));
        Some(big)
    }

    fn binary(w: &mut PtxWalker<'_>, op: BinOp, k: Kind, a: String, b: String) -> String {
        let float = matches!(k, Kind::F32 | Kind::F64);
        let ty = arith_ty(k);
        let bits = if k == Kind::I64 { "b64" } else { "b32" };
        let (a, b) = (a.as_str(), b.as_str());
        match op {
            BinOp::Add | BinOp::Sub | BinOp::Div if float => {
                let name = match op {
                    BinOp::Add => "add",
                    BinOp::Sub => "sub",
                    _ => "div",
                };
                w.op(k, &format!("{name}.rn.{ty}"), &[a, b])
            }
            BinOp::Mul if float => w.op(k, &format!("mul.rn.{ty}"), &[a, b]),
            BinOp::Add => w.op(k, &format!("add.{ty}"), &[a, b]),
            BinOp::Sub => w.op(k, &format!("sub.{ty}"), &[a, b]),
            BinOp::Mul => w.op(k, &format!("mul.lo.{ty}"), &[a, b]),
            BinOp::Div => w.int_div(k, false, a, b),
            BinOp::Rem if k == Kind::F32 => {
                let (wa, wb) = (w.t(Cls::F64), w.t(Cls::F64));
                w.emit(format!("cvt.f64.f32 {wa}, {a};"));
                w.emit(format!("cvt.f64.f32 {wb}, {b};"));
                let m = w.fmod64(&wa, &wb);
                w.op(k, "cvt.rn.f32.f64", &[&m])
            }
            BinOp::Rem if float => w.fmod64(a, b),
            BinOp::Rem => w.int_div(k, true, a, b),
            BinOp::And => w.op(k, &format!("and.{bits}"), &[a, b]),
            BinOp::Or => w.op(k, &format!("or.{bits}"), &[a, b]),
            BinOp::Xor => w.op(k, &format!("xor.{bits}"), &[a, b]),
            BinOp::Shl => w.shift(k, &format!("shl.{bits}"), a, b),
            BinOp::Shr => w.shift(k, &format!("shr.{ty}"), a, b),
            BinOp::Ushr => {
                let u = if k == Kind::I64 { "u64" } else { "u32" };
                w.shift(k, &format!("shr.{u}"), a, b)
            }
            BinOp::Min | BinOp::Max if float => w.fminmax(k, op == BinOp::Max, a, b),
            BinOp::Min => w.op(k, &format!("min.{ty}"), &[a, b]),
            BinOp::Max => w.op(k, &format!("max.{ty}"), &[a, b]),
            BinOp::Pow => {
                let r = ptxlib::routine(offload_ir::isa::Op::Binary(k, op)).expect("pow");
                w.transcendental(r, k, vec![a.to_string(), b.to_string()])
            }
        }
    }

    fn unary(w: &mut PtxWalker<'_>, op: UnOp, k: Kind, a: String) -> String {
        let ty = arith_ty(k);
        let f64 = k == Kind::F64;
        match op {
            UnOp::Neg if f64 => w.flip_bits(k, "xor", "0x8000000000000000", &a),
            UnOp::Neg if k == Kind::F32 => w.flip_bits(k, "xor", "0x80000000", &a),
            UnOp::Neg => w.op(k, &format!("neg.{ty}"), &[&a]),
            UnOp::Abs if f64 => w.flip_bits(k, "and", "0x7FFFFFFFFFFFFFFF", &a),
            UnOp::Abs if k == Kind::F32 => w.flip_bits(k, "and", "0x7FFFFFFF", &a),
            UnOp::Abs => {
                let n = w.op(k, &format!("neg.{ty}"), &[&a]);
                let p = w.t(Cls::Pred);
                w.emit(format!("setp.lt.{ty} {p}, {a}, 0;"));
                w.op(k, &format!("selp.{ty}"), &[&n, &a, &p])
            }
            UnOp::Sqrt => w.op(k, &format!("sqrt.rn.{ty}"), &[&a]),
            UnOp::Floor => w.op(k, &format!("cvt.rmi.{ty}.{ty}"), &[&a]),
            UnOp::Ceil => w.op(k, &format!("cvt.rpi.{ty}.{ty}"), &[&a]),
            UnOp::Exp | UnOp::Log | UnOp::Sin | UnOp::Cos => {
                let r = ptxlib::routine(offload_ir::isa::Op::Unary(k, op)).expect("libm");
                w.transcendental(r, k, vec![a])
            }
        }
    }

    fn fma(w: &mut PtxWalker<'_>, k: Kind, a: String, b: String, c: String) -> String {
        let op = format!("fma.rn.{}", arith_ty(k));
        w.op(k, &op, &[&a, &b, &c])
    }

    fn compare(w: &mut PtxWalker<'_>, op: CmpOp, k: Kind, a: String, b: String) -> String {
        let cc = match op {
            CmpOp::Eq => "eq",
            // Ordered comparisons are false on NaN; `ne` is unordered
            // (true) for floats.
            CmpOp::Ne if matches!(k, Kind::F32 | Kind::F64) => "neu",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        };
        w.setp_i32(&format!("{cc}.{}", arith_ty(k)), &a, &b)
    }

    fn convert(w: &mut PtxWalker<'_>, from: Kind, to: Kind, a: String) -> String {
        let op = match (from, to) {
            (Kind::I32, Kind::I64) => "cvt.s64.s32".to_string(),
            (Kind::I64, Kind::I32) => "cvt.u32.u64".to_string(),
            (Kind::I32 | Kind::I64, _) => format!("cvt.rn.{}.{}", arith_ty(to), arith_ty(from)),
            (Kind::F32, Kind::F64) => "cvt.f64.f32".to_string(),
            (Kind::F64, Kind::F32) => "cvt.rn.f32.f64".to_string(),
            // Float → integer conversions saturate in PTX; NaN gives 0
            // only from an f32 to a 32-bit integer, MININT otherwise (PTX
            // ISA, `cvt`), and the bytecode says 0: select it.
            _ => {
                let op = format!("cvt.rzi.{}.{}", arith_ty(to), arith_ty(from));
                let r = w.op(to, &op, &[&a]);
                if from == Kind::F64 || to == Kind::I64 {
                    let p = w.t(Cls::Pred);
                    w.emit(format!("setp.nan.{} {p}, {a}, {a};", arith_ty(from)));
                    w.emit(format!("selp.{} {r}, 0, {r}, {p};", arith_ty(to)));
                }
                return r;
            }
        };
        w.op(to, &op, &[&a])
    }

    fn obj_addr(w: &mut PtxWalker<'_>, r: String) -> String {
        w.obj_addr(&r)
    }

    fn array_len(w: &mut PtxWalker<'_>, base: String) -> String {
        let len = w.t(Cls::B32);
        w.emit(format!("ld.u32 {len}, [{base}+4];"));
        len
    }

    fn class_tag(w: &mut PtxWalker<'_>, r: String) -> String {
        w.class_of(&r)
    }

    fn header_tag(w: &mut PtxWalker<'_>, r: String) -> String {
        w.header_tag(&r)
    }

    fn tag_in(w: &mut PtxWalker<'_>, tag: String, ids: &[u32]) -> String {
        w.tag_in(&tag, ids)
    }

    fn elem_addr(
        w: &mut PtxWalker<'_>,
        r: String,
        idx: String,
        size: u32,
        bci: Bci,
        from_top: usize,
    ) -> String {
        // A predicated loop's covered access first: its invariant loads
        // are hoisted out of the loop (a workitem's `px[b]` in nbody's).
        if let Some(a) = w.loop_elem_addr(&idx, size, bci) {
            return a;
        }
        if let Some(a) = w.proven_elem_addr(&idx, size, bci) {
            return a;
        }
        w.null_check_unless_known(r.clone(), bci, from_top);
        let base = w.obj_addr(&r);
        let len = Self::array_len(w, base.clone());
        let p = w.t(Cls::Pred);
        w.emit(format!("setp.ge.u32 {p}, {idx}, {len};"));
        w.deopt_if(p, bci, Reason::BoundsCheck);
        let a = w.t(Cls::B64);
        w.emit(format!("mul.wide.u32 {a}, {idx}, {size};"));
        w.emit(format!("add.u64 {a}, {a}, {base};"));
        w.emit(format!("add.u64 {a}, {a}, 8;"));
        a
    }

    fn field_addr(_w: &mut PtxWalker<'_>, base: String, off: u32) -> String {
        format!("{base}+{off}")
    }

    fn load(w: &mut PtxWalker<'_>, k: Kind, addr: String, off: u32) -> String {
        if off == 0
            && let Some(x) = w.backend.loop_hoisted.get(&addr)
        {
            return x.clone();
        }
        if off == 0
            && let Some(x) = w.reused_load(&addr, k)
        {
            return x;
        }
        let x = w.t(cls(k));
        let at = if off == 0 {
            addr.clone()
        } else {
            format!("{addr}+{off}")
        };
        w.emit(format!("ld.{} {x}, [{at}];", field_ty(k)));
        if off == 0 {
            w.remember_load(&addr, k, &x);
        }
        x
    }

    fn store(w: &mut PtxWalker<'_>, k: Kind, addr: String, off: u32, x: String) {
        let at = if off == 0 {
            addr
        } else {
            format!("{addr}+{off}")
        };
        w.emit(format!("st.{} [{at}], {x};", field_ty(k)));
        w.mark_dirty(&at);
    }

    fn write_barrier(_w: &mut PtxWalker<'_>, _r: String, _x: String) {
        // The device heap has no nursery and the launch's objects stay.
    }

    fn atomic_add(w: &mut PtxWalker<'_>, k: Kind, addr: String, x: String) -> String {
        let old = w.t(cls(k));
        let ty = if k == Kind::I64 { "u64" } else { "u32" };
        w.emit(format!("atom.add.{ty} {old}, [{addr}], {x};"));
        w.mark_dirty(&addr);
        old
    }

    fn cmpxchg(
        w: &mut PtxWalker<'_>,
        k: Kind,
        addr: String,
        expected: String,
        new: String,
    ) -> String {
        let old = w.t(cls(k));
        let ty = if k == Kind::I64 { "b64" } else { "b32" };
        w.emit(format!("atom.cas.{ty} {old}, [{addr}], {expected}, {new};"));
        w.mark_dirty(&addr);
        old
    }

    fn instance_of(w: &mut PtxWalker<'_>, r: String, ty: Type) -> String {
        let yes = w.type_test(&r, ty);
        w.emit(format!("setp.ne.and.u32 {yes}, {r}, 0, {yes};"));
        let x = w.t(Cls::B32);
        w.emit(format!("selp.b32 {x}, 1, 0, {yes};"));
        x
    }

    fn cast_fails(w: &mut PtxWalker<'_>, r: String, ty: Type) -> String {
        let yes = w.type_test(&r, ty);
        // fail = !yes && r != 0
        let fail = w.t(Cls::Pred);
        w.emit(format!("setp.ne.u32 {fail}, {r}, 0;"));
        let nyes = w.t(Cls::Pred);
        w.emit(format!("not.pred {nyes}, {yes};"));
        w.emit(format!("and.pred {fail}, {fail}, {nyes};"));
        fail
    }

    fn new_object(w: &mut PtxWalker<'_>, bci: Bci, tag: u32, size: u32) -> String {
        let (t, w1, words) = (w.t(Cls::B32), w.t(Cls::B32), w.t(Cls::B64));
        w.emit(format!("mov.b32 {t}, {tag};"));
        w.emit(format!("mov.b32 {w1}, {size};"));
        w.emit(format!("mov.u64 {words}, {};", size / 8));
        // The page tag of an instance is its class's global id.
        w.allocate(bci, tag, &t, &w1, &words)
    }

    fn new_array(w: &mut PtxWalker<'_>, bci: Bci, tag: u32, esize: u32, len: String) -> String {
        let t = w.t(Cls::B32);
        w.emit(format!("mov.b32 {t}, {tag};"));
        // words = (len * esize + 15) / 8
        let words = w.t(Cls::B64);
        w.emit(format!("mul.wide.u32 {words}, {len}, {esize};"));
        w.emit(format!("add.u64 {words}, {words}, 15;"));
        w.emit(format!("shr.u64 {words}, {words}, 3;"));
        w.allocate(bci, offload_abi::pages::ARRAYS, &t, &len, &words)
    }
}
