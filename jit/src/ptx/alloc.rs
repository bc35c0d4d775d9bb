//! Allocation on the device: the shared-TLAB protocol of
//! `offload_heap::tlab` in PTX, with the designated refiller carving TLABs
//! from the device eden.
//!
//! Each slot group has a TLAB per kind of what the kernel allocates
//! (`Program::allocation_kinds`, `offload_heap::pages`). With one kind
//! the device eden's pages carry its tag (the host carves it so); with
//! several, the host carves the device eden from mixed pages starting on
//! a page boundary, every carve from it is whole pages, and the carver of
//! pages for a class kind writes the class into the device's page table
//! before it publishes them: what the TLAB then holds is found by address
//! like the host's objects. The host takes those tags back after the
//! launch (`src/cuda/grid.rs`).

use super::*;
use offload_abi::gpu::{EDEN_LIMIT, EDEN_TOP, counter};
use offload_abi::tlab;

impl PtxWalker<'_> {
    /// Write a filler header over words `[start, end)` (`b64` registers,
    /// `start < end`).
    pub(super) fn fill(&mut self, start: &str, end: &str) {
        let a = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {a}, {start}, 8, {HEAP};"));
        let n = self.t(Cls::B64);
        self.emit(format!("sub.u64 {n}, {end}, {start};"));
        let bytes = self.t(Cls::B32);
        self.emit(format!("cvt.u32.u64 {bytes}, {n};"));
        self.emit(format!("shl.b32 {bytes}, {bytes}, 3;"));
        let tag = self.t(Cls::B32);
        self.emit(format!(
            "mov.b32 {tag}, {};",
            offload_heap::layout::FILLER_TAG
        ));
        self.emit(format!("st.u32 [{a}], {tag};"));
        self.emit(format!("st.u32 [{a}+4], {bytes};"));
    }

    /// Allocate `words` (`b64`) heap words with header `(tag, word1)`
    /// (`b32`) whose page tag (`offload_abi::pages`) is `page_tag`: the
    /// shared-TLAB protocol on the device, on the slot group's TLAB of
    /// that kind (see the module docs). Deopts with `AllocationFailure`
    /// when eden is exhausted. Returns the reference.
    pub(super) fn allocate(
        &mut self,
        bci: Bci,
        page_tag: u32,
        tag: &str,
        word1: &str,
        words: &str,
    ) -> String {
        self.backend.allocates = true;
        let kinds = self.backend.alloc_kinds.clone();
        let kind = offload_heap::alloc::kind_of(&kinds, Some(page_tag));
        // With several kinds every carve is whole pages, and one for a
        // class kind tags its pages.
        let paged = kinds.len() > 1;
        let class_tag = kind
            .map(|k| kinds[k])
            .filter(|&t| paged && t != offload_abi::pages::MIXED);
        let got = self.t(Cls::B64);
        let l_got = self.new_label();
        let l_large = self.new_label();
        let l_retry = self.new_label();
        let l_fail = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("// allocate at bci {bci}"));
        self.emit(format!("setp.eq.u64 {p}, {TLAB}, 0;"));
        self.emit(format!("setp.gt.or.u64 {p}, {words}, {LARGE}, {p};"));
        // (A site of no kind — never made: the kinds come from the same
        // instructions — takes eden, on mixed pages.)
        let Some(kind) = kind else {
            self.emit(format!("bra {l_large};"));
            return self.allocate_rest(
                bci,
                (tag, word1, words),
                None,
                paged,
                got,
                l_got,
                l_large,
                l_fail,
            );
        };
        self.emit(format!("@{p} bra {l_large};"));
        // This kind's TLAB of the slot group.
        let tl = if kind == 0 {
            TLAB.to_string()
        } else {
            let tl = self.t(Cls::B64);
            self.emit(format!(
                "add.u64 {tl}, {TLAB}, {};",
                kind * offload_abi::gpu::TLAB_BYTES as usize
            ));
            tl
        };
        let tl = tl.as_str();
        // 1. generation; 2. the add.
        self.label(&l_retry);
        let g = self.t(Cls::B64);
        self.emit(format!(
            "ld.acquire.gpu.u64 {g}, [{tl}+{}];",
            tlab::GENERATION_OFFSET
        ));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s64 {p}, {g}, 0;")); // FAILED is the sign bit
        self.emit(format!("@{p} bra {l_fail};"));
        let old = self.t(Cls::B64);
        self.emit(format!(
            "atom.acq_rel.gpu.add.u64 {old}, {}, {words};",
            mem(tl, tlab::STATE_OFFSET)
        ));
        let top = self.t(Cls::B64);
        let end = self.t(Cls::B64);
        self.emit(format!("and.b64 {top}, {old}, {};", u32::MAX));
        self.emit(format!("shr.u64 {end}, {old}, {};", tlab::END_SHIFT));
        let nt = self.t(Cls::B64);
        self.emit(format!("add.u64 {nt}, {top}, {words};"));
        self.emit(format!("mov.u64 {got}, {top};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.u64 {p}, {nt}, {end};"));
        self.emit(format!("@{p} bra {l_got};"));
        // 4. another allocator is refilling: wait for the generation.
        let l_refill = self.new_label();
        let l_wait = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.u64 {p}, {top}, {end};"));
        self.emit(format!("@{p} bra {l_refill};"));
        let stats = self.t(Cls::B64);
        self.emit(format!("ld.param.u64 {stats}, [p_ctx+{}];", offsets::STATS));
        self.emit(format!(
            "red.add.u64 [{stats}+{}], 1;",
            counter::byte(counter::REFILL_WAITS)
        ));
        self.label(&l_wait);
        self.emit("nanosleep.u32 100;");
        let g2 = self.t(Cls::B64);
        self.emit(format!(
            "ld.acquire.gpu.u64 {g2}, [{tl}+{}];",
            tlab::GENERATION_OFFSET
        ));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.u64 {p}, {g2}, {g};"));
        self.emit(format!("@{p} bra {l_wait};"));
        self.emit(format!("bra {l_retry};"));
        // 3. the designated refiller: fill the gap, carve, publish.
        self.label(&l_refill);
        let l_carve = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u64 {p}, {top}, {end};"));
        self.emit(format!("@{p} bra {l_carve};"));
        self.fill(&top, &end);
        self.label(&l_carve);
        let want = self.t(Cls::B64);
        self.emit(format!(
            "ld.param.u64 {want}, [p_ctx+{}];",
            offsets::TLAB_WORDS
        ));
        if class_tag.is_some() {
            // A class kind's TLAB starts at a page and doubles with each of
            // its refills (`CLASS_KIND_DOUBLINGS`).
            let n = self.t(Cls::B64);
            self.emit(format!("ld.u64 {n}, [{tl}+{}];", tlab::REFILLS_OFFSET));
            self.emit(format!(
                "min.u64 {n}, {n}, {};",
                offload_heap::alloc::CLASS_KIND_DOUBLINGS
            ));
            let n32 = self.t(Cls::B32);
            self.emit(format!("cvt.u32.u64 {n32}, {n};"));
            let grown = self.t(Cls::B64);
            self.emit(format!(
                "shl.b64 {grown}, {}, {n32};",
                offload_abi::pages::PAGE_WORDS
            ));
            self.emit(format!("min.u64 {want}, {want}, {grown};"));
        }
        self.emit(format!("max.u64 {want}, {want}, {words};"));
        if paged {
            self.round_to_pages(&want);
        }
        let (start, new_end) = self.carve(&want, &l_fail, Some(tl));
        if let Some(t) = class_tag {
            self.tag_pages(&start, &new_end, t);
        }
        let st = self.t(Cls::B64);
        self.emit(format!("add.u64 {st}, {start}, {words};"));
        self.emit(format!(
            "shl.b64 {new_end}, {new_end}, {};",
            tlab::END_SHIFT
        ));
        self.emit(format!("or.b64 {st}, {st}, {new_end};"));
        let x = self.t(Cls::B64);
        self.emit(format!(
            "atom.acq_rel.gpu.exch.b64 {x}, {}, {st};",
            mem(tl, tlab::STATE_OFFSET)
        ));
        self.emit(format!("red.add.u64 [{tl}+{}], 1;", tlab::REFILLS_OFFSET));
        self.emit(format!(
            "red.release.gpu.add.u64 [{tl}+{}], 1;",
            tlab::GENERATION_OFFSET
        ));
        let stats = self.t(Cls::B64);
        self.emit(format!("ld.param.u64 {stats}, [p_ctx+{}];", offsets::STATS));
        self.emit(format!(
            "red.add.u64 [{stats}+{}], 1;",
            counter::byte(counter::REFILLS)
        ));
        self.emit(format!("mov.u64 {got}, {start};"));
        self.emit(format!("bra {l_got};"));
        self.allocate_rest(
            bci,
            (tag, word1, words),
            class_tag,
            paged,
            got,
            l_got,
            l_large,
            l_fail,
        )
    }

    /// The rest of [`PtxWalker::allocate`]: large objects (and TLAB-less
    /// policies) straight from eden — whole pages when `paged`, tagged
    /// `class_tag` if any — the deopt when eden is exhausted, and the
    /// header of the object at `got`.
    #[allow(clippy::too_many_arguments)]
    fn allocate_rest(
        &mut self,
        bci: Bci,
        (tag, word1, words): (&str, &str, &str),
        class_tag: Option<u32>,
        paged: bool,
        got: String,
        l_got: String,
        l_large: String,
        l_fail: String,
    ) -> String {
        self.label(&l_large);
        let n = if paged {
            let n = self.t(Cls::B64);
            self.emit(format!("mov.u64 {n}, {words};"));
            self.round_to_pages(&n);
            n
        } else {
            words.to_string()
        };
        let (start, end) = self.carve(&n, &l_fail, None);
        if let Some(t) = class_tag {
            self.tag_pages(&start, &end, t);
        }
        if paged {
            // The pages' rest after the object parses as a filler.
            let rest = self.t(Cls::B64);
            self.emit(format!("add.u64 {rest}, {start}, {words};"));
            let l_full = self.new_label();
            let p = self.t(Cls::Pred);
            self.emit(format!("setp.ge.u64 {p}, {rest}, {end};"));
            self.emit(format!("@{p} bra {l_full};"));
            self.fill(&rest, &end);
            self.label(&l_full);
        }
        self.emit(format!("mov.u64 {got}, {start};"));
        self.emit(format!("bra {l_got};"));
        // Eden exhausted.
        self.label(&l_fail);
        self.deopt_here(bci, Reason::AllocationFailure);
        // The object is at `got`: its memory is zero; write the header.
        self.label(&l_got);
        let a = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {a}, {got}, 8, {HEAP};"));
        self.emit(format!("st.u32 [{a}], {tag};"));
        self.emit(format!("st.u32 [{a}+4], {word1};"));
        let r = self.t(Cls::B32);
        self.emit(format!("cvt.u32.u64 {r}, {got};"));
        r
    }

    /// Round `n` (a `b64` register of words) up to whole pages, in place.
    fn round_to_pages(&mut self, n: &str) {
        let mask = u64::from(offload_abi::pages::PAGE_WORDS) - 1;
        self.emit(format!("add.u64 {n}, {n}, {mask};"));
        self.emit(format!("and.b64 {n}, {n}, {:#x};", !mask));
    }

    /// Write `tag` into the device's page table for the pages of words
    /// `[start, end)` (`b64` registers, whole pages), before the carver
    /// publishes them.
    fn tag_pages(&mut self, start: &str, end: &str, tag: u32) {
        let table = self.ld_ctx(Cls::B64, offsets::PAGES);
        let (p, last) = (self.t(Cls::B64), self.t(Cls::B64));
        let shift = offload_abi::pages::PAGE_SHIFT;
        self.emit(format!("shr.u64 {p}, {start}, {shift};"));
        self.emit(format!("shr.u64 {last}, {end}, {shift};"));
        let t = self.t(Cls::B32);
        self.emit(format!("mov.b32 {t}, {tag};"));
        let (l_loop, l_done) = (self.new_label(), self.new_label());
        self.label(&l_loop);
        let q = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u64 {q}, {p}, {last};"));
        self.emit(format!("@{q} bra {l_done};"));
        let a = self.t(Cls::B64);
        self.emit(format!(
            "mad.lo.u64 {a}, {p}, {}, {table};",
            offload_abi::pages::TAG_BYTES
        ));
        self.emit(format!("st.u32 [{a}], {t};"));
        self.emit(format!("add.u64 {p}, {p}, 1;"));
        self.emit(format!("bra {l_loop};"));
        self.label(&l_done);
    }

    /// Carve `n` words from the device eden: `(start, end)` registers, or a
    /// jump to `fail`. The one carve that crosses the limit fills the rest
    /// of eden (so the heap parses) and, for a TLAB refill, sets its FAILED
    /// bit (waiters see the generation change and fail too).
    pub(super) fn carve(&mut self, n: &str, fail: &str, tlab: Option<&str>) -> (String, String) {
        let start = self.t(Cls::B64);
        self.emit(format!(
            "atom.add.u64 {start}, {}, {n};",
            mem(EDEN, 8 * EDEN_TOP as i32)
        ));
        let limit = self.t(Cls::B64);
        self.emit(format!("ld.u64 {limit}, [{EDEN}+{}];", 8 * EDEN_LIMIT));
        let end = self.t(Cls::B64);
        self.emit(format!("add.u64 {end}, {start}, {n};"));
        let ok = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.u64 {p}, {end}, {limit};"));
        self.emit(format!("@{p} bra {ok};"));
        let skip = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u64 {p}, {start}, {limit};"));
        self.emit(format!("@{p} bra {skip};"));
        self.fill(&start, &limit);
        self.label(&skip);
        if let Some(t) = tlab {
            self.emit(format!(
                "red.release.gpu.or.b64 [{t}+{}], {:#x};",
                tlab::GENERATION_OFFSET,
                tlab::FAILED
            ));
        }
        let stats = self.t(Cls::B64);
        self.emit(format!("ld.param.u64 {stats}, [p_ctx+{}];", offsets::STATS));
        self.emit(format!(
            "red.add.u64 [{stats}+{}], 1;",
            counter::byte(counter::EDEN_FAILURES)
        ));
        self.emit(format!("bra {fail};"));
        self.label(&ok);
        (start, end)
    }
}
