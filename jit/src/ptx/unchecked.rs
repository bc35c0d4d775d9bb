//! The unchecked version of a kernel's body: array accesses indexed by the
//! workitem number, proven inside their arrays once per slot.
//!
//! The accesses are the CPU's ([`crate::cpu::opt::workitem_indexed`]):
//! `a[i]` with `i` the workitem number as `i32` and `a` a reference
//! parameter the kernel never assigns. When the launch's range
//! `[start, end)` has `0 <= start` and `end <= a.length` for every such
//! `a` (null's length reads 0), none of them can fail for any workitem of
//! the launch — every slot's part and every rest of it lies in that range
//! — so each slot decides once, in its prologue, and runs its workitems in
//! a second copy of the body where those accesses are an address and a
//! load or store: no null test, no length load, no compare, and the
//! array's element 0 computed once (`%ebaseN`). Accesses the proof does
//! not cover keep their checks in both copies.
//!
//! **Dirty chunks.** The checked body marks the chunk of every store in
//! the dirty map. In the unchecked copy, the stores into array `a` at
//! proven accesses mark nothing: the prologue marks every chunk that
//! elements `[start, end)` of `a` touch, each slot the chunks congruent to
//! its number (one or two stores per slot at most, the slots being many
//! more than the chunks). Marking a chunk a kernel did not write is safe:
//! the host then fetches the device's copy of it, which equals its own
//! (the image is brought up to date before every launch).
//!
//! In a kernel with re-entry points (loops, allocation) the landings of
//! `lower/reentry.rs` are lowered into the checked body only: a record
//! left by either copy resumes there (its values are the frame's, whichever
//! copy wrote them), and the unchecked copy's own polls and slow paths
//! exit to the save area as the checked body's do.

use super::*;
use offload_ir::Inst;
use std::collections::BTreeMap;

/// Whether the unchecked copy runs: true in a slot whose launch range
/// passed the test of the module docs.
pub(super) const FASTP: &str = "%fastp";
pub(super) const L_BODY_FAST: &str = "$body_fast";
pub(super) const L_NEXT_FAST: &str = "$next_fast";

/// The proven accesses of the kernel, and per array parameter the
/// element size of its stores at those (absent when none stores).
pub(super) struct Proven {
    pub(super) accesses: BTreeMap<Bci, u32>,
    stores: BTreeMap<u32, u32>,
}

impl PtxWalker<'_> {
    /// The kernel's proven accesses, if it gets an unchecked version (not
    /// on the quick tier, not with none).
    pub(super) fn proven(&self) -> Option<Proven> {
        if self.opts.quick {
            return None;
        }
        let accesses = crate::cpu::opt::workitem_indexed(self.v, self.cur.func, self.cur.analysis);
        if accesses.is_empty() {
            return None;
        }
        let body = &self.v.func(self.cur.func).body;
        let mut stores = BTreeMap::new();
        for (&bci, &p) in &accesses {
            let inst = body[bci as usize];
            let writes = matches!(
                inst,
                Inst::I32AStore
                    | Inst::F32AStore
                    | Inst::RefAStore
                    | Inst::I64AStore
                    | Inst::F64AStore
                    | Inst::I32ArrayAtomicAdd
                    | Inst::I64ArrayAtomicAdd
                    | Inst::I32ArrayCmpxchg
                    | Inst::I64ArrayCmpxchg
            );
            if writes {
                stores.insert(p, crate::lower::elem(inst).1);
            }
        }
        Some(Proven { accesses, stores })
    }

    /// The slot's test (into [`FASTP`]), each proven array's element 0
    /// (`%ebaseN`, from the kernel's `p_elems` parameter), and the dirty
    /// chunks of the stored arrays' ranges.
    pub(super) fn unchecked_prologue(&mut self, proven: &Proven) {
        self.named(FASTP.into(), ".pred");
        let (start, end) = (
            self.ld_ctx(Cls::B64, offsets::START),
            self.ld_ctx(Cls::B64, offsets::END),
        );
        self.emit(format!("setp.ge.s64 {FASTP}, {start}, 0;"));
        let arrays: BTreeSet<u32> = proven.accesses.values().copied().collect();
        for p in arrays {
            // Element 0's address, a parameter (`p_elems`): ptxas reads it
            // from the constant bank where it is used, so no register
            // holds it while the slot runs.
            let eb = self.named(format!("%ebase{p}"), ".b64");
            match self.backend.copy_entry.get(&p) {
                // An array a launch may sum into: its row's copy.
                Some(e) => self.emit(format!("ld.global.u64 {eb}, [{e}+8];")),
                None => self.emit(format!("ld.param.u64 {eb}, [p_elems+{}];", (p - 1) * 8)),
            }
            let (len, len64) = (self.t(Cls::B32), self.t(Cls::B64));
            self.emit(format!("ld.u32 {len}, [{eb}+-4];"));
            self.emit(format!("cvt.u64.u32 {len64}, {len};"));
            self.emit(format!("setp.le.and.s64 {FASTP}, {end}, {len64}, {FASTP};"));
            self.backend.ebase.insert(p, eb);
        }
        let skip = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("@!{FASTP} bra {skip};"));
        self.emit(format!("setp.le.s64 {p}, {end}, {start};"));
        self.emit(format!("@{p} bra {skip};"));
        let shift = offload_heap::resident::CHUNK_SHIFT;
        for (&a, &size) in &proven.stores {
            let eb = self.backend.ebase[&a].clone();
            let (c, last) = (self.t(Cls::B64), self.t(Cls::B64));
            self.emit(format!("mad.lo.u64 {c}, {start}, {size}, {eb};"));
            self.emit(format!("shr.u64 {c}, {c}, {shift};"));
            self.emit(format!("add.u64 {c}, {c}, {SLOT};"));
            self.emit(format!("add.s64 {last}, {end}, -1;"));
            self.emit(format!("mad.lo.u64 {last}, {last}, {size}, {eb};"));
            self.emit(format!("shr.u64 {last}, {last}, {shift};"));
            let (top, done) = (self.new_label(), self.new_label());
            self.label(&top);
            let q = self.t(Cls::Pred);
            self.emit(format!("setp.gt.u64 {q}, {c}, {last};"));
            self.emit(format!("@{q} bra {done};"));
            let m = self.t(Cls::B64);
            self.emit(format!("add.u64 {m}, {c}, {DIRTY};"));
            self.emit(format!("st.u8 [{m}], {ONE8};"));
            self.emit(format!("add.u64 {c}, {c}, {STRIDE};"));
            self.emit(format!("bra {top};"));
            self.label(&done);
        }
        self.label(&skip);
    }

    /// The unchecked copy of the body, from [`L_BODY_FAST`] (the caller
    /// branches there when [`FASTP`] holds), its workitems ending at
    /// [`L_NEXT_FAST`].
    pub(super) fn unchecked_body(
        &mut self,
        proven: Proven,
        captures: &[String],
    ) -> Result<(), JitError> {
        self.label(L_BODY_FAST);
        self.workitem_entry(captures);
        self.backend.unchecked = proven.accesses;
        self.backend.known =
            crate::cpu::opt::workitem_tests(self.v, self.cur.func, self.cur.analysis);
        self.backend.copy = 1;
        self.backend.next_label = L_NEXT_FAST;
        self.inliner.next_version();
        self.make_blocks();
        let first = self.cur.blocks[&0].clone();
        self.emit(format!("bra {first};"));
        let body = self.kernel_body();
        self.backend.unchecked.clear();
        self.backend.known.clear();
        self.backend.proven_at.clear();
        self.backend.loaded.clear();
        self.call_results.clear();
        self.backend.copy = 0;
        self.backend.next_label = L_NEXT;
        body?;
        self.next_item(L_NEXT_FAST, L_BODY_FAST);
        Ok(())
    }

    /// The address of element `idx` (of `size` bytes) at a proven access
    /// `bci` of the unchecked copy, or `None` elsewhere. A store through
    /// it marks nothing (its chunk is marked).
    pub(super) fn proven_elem_addr(&mut self, idx: &str, size: u32, bci: Bci) -> Option<String> {
        if !self.outer.is_empty() {
            return None;
        }
        let p = *self.backend.unchecked.get(&bci)?;
        let eb = self.backend.ebase[&p].clone();
        // Each step into a fresh register: a load and a store of one
        // element share them (`opt`'s common subexpressions).
        let (off, a) = (self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("mul.wide.u32 {off}, {idx}, {size};"));
        self.emit(format!("add.u64 {a}, {off}, {eb};"));
        self.backend.premarked.insert(a.clone());
        self.backend.proven_at.insert(a.clone(), (p, bci));
        Some(a)
    }

    /// The value an earlier load of the unchecked copy read from the
    /// element at proven address `addr` (of kind `k`), if the load there may
    /// reuse it (`lower::reuse`); else `None`, and the caller's load is the
    /// one later loads of the element may reuse.
    pub(super) fn reused_load(&self, addr: &str, k: Kind) -> Option<String> {
        let &(p, bci) = self.backend.proven_at.get(addr)?;
        if let Some((first, x)) = self.backend.loaded.get(&(p, k as u8))
            && crate::lower::reuse::reusable(self.v, self.cur.func, *first, bci)
        {
            return Some(x.clone());
        }
        None
    }

    /// Remember that the load at proven address `addr` read `x` (a
    /// register no other instruction assigns).
    pub(super) fn remember_load(&mut self, addr: &str, k: Kind, x: &str) {
        if let Some(&(p, bci)) = self.backend.proven_at.get(addr) {
            self.backend
                .loaded
                .insert((p, k as u8), (bci, x.to_string()));
        }
    }
}
