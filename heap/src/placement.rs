//! Placing objects on pages by tag, and checking the placement: the
//! host's open runs of pages per class ([`Heap::alloc_in_run`]), the check
//! of the page table against the headers ([`Heap::check_pages`]) and the
//! use of pages by tag ([`Heap::page_stats`]). The design is in
//! [`crate::pages`].

use crate::heap::{Heap, HeapError};
use crate::layout::Header;
use crate::pages::{PageKind, PageStats, tag_for, tag_name};
use offload_abi::pages::{MIXED, PAGE_WORDS, page_of};

impl Heap {
    /// Place an object of `words` words on the host's open run of pages of
    /// `tag` (a class, or arrays), carving a new run (a page, or as many
    /// as the object needs) when it does not fit. The rest of a run is
    /// always one filler, so the heap parses at every moment. Returns the
    /// word offset; the memory past the header is zero.
    pub(crate) fn alloc_in_run(&self, tag: u32, words: u64) -> Result<u32, HeapError> {
        let mut runs = self
            .host_runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (top, end) = match runs.get(&tag) {
            Some(&(top, end)) if u64::from(top) + words <= u64::from(end) => (top, end),
            open => {
                let want = words.max(u64::from(PAGE_WORDS));
                let (start, end) = self.alloc_direct_run(words, want, tag)?;
                match open {
                    // Nothing was carved since this run: the new pages
                    // continue it, and the object starts at its top (over
                    // the filler that closed it), so a class's objects
                    // stay packed across page boundaries.
                    Some(&(top, old_end)) if old_end == start => (top, end),
                    _ => (start, end),
                }
            }
        };
        let next = top + words as u32;
        if next < end {
            crate::tlab::Eden::fill(self, next, end);
        }
        runs.insert(tag, (next, end));
        Ok(top)
    }

    /// Carve at least `min` and up to `want` words on pages of `tag`.
    fn alloc_direct_run(&self, min: u64, want: u64, tag: u32) -> Result<(u32, u32), HeapError> {
        self.carve_words(min, want, true, false, tag)
            .map(|(s, e)| (s as u32, e as u32))
            .ok_or(HeapError::Exhausted {
                needed: min * 8,
                max: self.config().max,
            })
    }

    /// Check the page table against the headers: every object (not
    /// filler) starts on a page whose tag is its class,
    /// [`ARRAYS`](offload_abi::pages::ARRAYS) for an array, or [`MIXED`].
    /// Call only when the heap parses (no unretired TLAB).
    /// [`Heap::verify`] checks this too.
    pub fn check_pages(&self) -> Result<(), HeapError> {
        let mut bad = None;
        self.walk(|r, h| {
            if bad.is_some() {
                return;
            }
            bad = self.misplaced(r.0, h);
        })?;
        bad.map_or(Ok(()), Err)
    }

    /// The error for an object `h` at word `r` on a page whose tag is not
    /// its own (see [`Heap::check_pages`]), if it is.
    pub(crate) fn misplaced(&self, r: u32, h: Header) -> Option<HeapError> {
        let tag = self.pages.tag_of(r);
        (tag != MIXED && tag_for(h).is_some_and(|want| want != tag)).then(|| HeapError::Corrupt {
            at: r,
            what: format!("{h} lies on page {} tagged {}", page_of(r), tag_name(tag)),
        })
    }

    /// How the pages are used, by tag (what `:heap` shows). Call only when
    /// the heap parses.
    pub fn page_stats(&self) -> Result<PageStats, HeapError> {
        let mut kinds: std::collections::BTreeMap<u32, PageKind> = Default::default();
        let mut last_page = None;
        self.walk(|r, h| {
            let page = page_of(r.0);
            let tag = self.pages.tag(page);
            let k = kinds.entry(tag).or_insert_with(|| PageKind {
                tag,
                ..PageKind::default()
            });
            let bytes = h.size().unwrap_or(0);
            match h {
                Header::Filler { .. } => k.filler_bytes += bytes,
                _ => {
                    k.objects += 1;
                    k.object_bytes += bytes;
                }
            }
            // Every page the block covers, once, to the kind of the page
            // it starts on (the walk goes in address order).
            let words = (bytes / 8).max(1);
            let last = page_of(r.0 + words as u32 - 1);
            let first = match last_page {
                Some(p) if p >= page => p + 1,
                _ => page,
            };
            if last >= first {
                k.pages += (last - first + 1) as u64;
            }
            last_page = Some(last_page.map_or(last, |p: usize| p.max(last)));
        })?;
        Ok(PageStats {
            kinds: kinds.into_values().collect(),
        })
    }
}
