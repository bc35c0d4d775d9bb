//! The collector: a full, stop-the-world, sliding mark-compact collection
//! of the whole heap, with parallel marking.
//!
//! # Why this algorithm
//!
//! TLABs are carved from one contiguous eden by moving its top, so a
//! collection must give back *contiguous* space at the top: a free list
//! under the bump allocator would leave holes no TLAB can use. Of the two
//! ways to get it, copying needs a to-space as large as the live data —
//! half the maximum heap held back, which a GPU's memory (the heap is
//! copied there whole) cannot spare — while sliding compaction works in
//! place and keeps objects in allocation order (what a kernel's loop over
//! them allocated side by side stays side by side). So: **mark** everything
//! reachable from the roots; **compute** each live object's new address;
//! **update** every reference (in live objects and in the roots); **slide**
//! the live words down to their new addresses.
//!
//! * Marking sets a bit per live object start in a side bitmap, and runs on
//!   every worker of the calling rayon pool: each task traces from a stack
//!   of its own and hands half of it to a new task when it grows long, so
//!   wide graphs spread over the workers (a long list is inherently
//!   sequential).
//! * Forwarding needs no word in the objects (the header is all they have):
//!   a second bitmap has a bit for *every word* of every live object, and a
//!   table holds, per 64 heap words, where the first live word among them
//!   goes. An object's new address is that entry plus the live words before
//!   it in its 64 — one popcount (the "Compressor" scheme), built on
//!   every worker (`forward.rs`).
//! * The slide copies runs of adjacent live objects with one `memmove`
//!   each, in chunks that run on every worker in waves: a chunk waits only
//!   for the earlier chunks whose live words lie where it copies to
//!   (`slide.rs`).
//! * Objects that are already in place (everything live below the first
//!   object that moves: long-lived data, with the fillers that end its
//!   runs of pages of one class where the slide's padding fills them
//!   again) are not copied, their references are updated where they lie,
//!   a reference to them is not looked up, and a reference that keeps its
//!   value is not stored back (`Forwarding::stays_below`). Only "dense
//!   from the start" counted before; with objects placed by class a run
//!   of pages ends in a filler, so a collection that moved nothing looked
//!   up and stored back every reference of the heap (100 MiB live in
//!   place: 27 ms of a 58 ms pause besides marking).
//! * Afterwards eden's top is the end of the live data; the memory above it
//!   that held garbage is zeroed by the next carve (see `Heap`'s high-water
//!   mark), so allocation still finds zeroed memory.
//!
//! A generational young collection over the launch nursery would trace
//! less, but needs a remembered set of old-to-young stores, which the
//! devices' write barrier only records as one "something escaped" bit per
//! launch; the pause measured here (BENCHMARKS.md) is well inside the
//! issue's budget, so the full collection stays simple and always exact.
//!
//! The collector needs the heap to itself: every allocator retired (the
//! heap parses from its start to its top) and no other thread reading or
//! writing it — a safepoint (see the runtime's docs).

mod bits;
mod forward;
mod mark;
mod slide;

use crate::heap::{ClassShape, FRESH, Heap, HeapError, pack_top};
use crate::layout::HEAP_START_WORDS;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The collector's roots: something that can show it every reference it
/// holds, as a mutable cell. [`Heap::collect`] calls [`Roots::visit`]
/// twice: once to read the roots (marking), once to update them (after
/// objects moved). Both calls must visit the same cells.
pub trait Roots {
    /// Call `f` on every reference cell (word offsets; 0 is null and left
    /// alone).
    fn visit(&mut self, f: &mut dyn FnMut(&mut u32));
}

impl<F: FnMut(&mut dyn FnMut(&mut u32))> Roots for F {
    fn visit(&mut self, f: &mut dyn FnMut(&mut u32)) {
        self(f)
    }
}

/// What one collection did. Sizes are bytes of eden in use (`Heap::used`,
/// the two reserved words at the heap's start included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcStats {
    /// Bytes in use before.
    pub before: u64,
    /// Bytes in use after: the two reserved words, the surviving objects
    /// and [`GcStats::padding`].
    pub after: u64,
    /// Bytes of fillers between survivors after: padding the slide adds so
    /// that each class keeps pages of its own (`crate::pages`) and large
    /// arrays keep their elements on a cache line, and the colour gaps it
    /// keeps before large arrays; part of `after`.
    pub padding: u64,
    /// Objects and arrays that survived (fillers kept as colour gaps are
    /// not counted).
    pub live_objects: u64,
    /// Of `live_objects`, the arrays (the rest are instances of classes).
    pub live_arrays: u64,
    /// Bytes of surviving objects that moved.
    pub moved: u64,
    /// Non-null roots visited.
    pub roots: u64,
    /// Bytes of committed memory given back to the system after the
    /// collection (`Heap::committed` fell by this much).
    pub released: u64,
    /// Time to bring every worker to the safepoint the collection ran in
    /// (set by the runtime that stopped them; zero for a collection of a
    /// heap no one else uses).
    pub to_safepoint: Duration,
    /// Time to mark, with the live-word bitmap and the counts marking
    /// fills as it goes.
    pub mark: Duration,
    /// Time to compute new addresses, update references and move objects
    /// (references in moved objects are updated as they land).
    pub compact: Duration,
}

impl GcStats {
    /// Bytes freed: `before - after`.
    pub fn freed(&self) -> u64 {
        self.before.saturating_sub(self.after)
    }

    /// The pause: `to_safepoint + mark + compact`, the time the launch's
    /// workers stood still for this collection. The one figure every
    /// report of a collection's pause shows (`:gc`, `:heap`,
    /// `GcSummary::pause` adds these up).
    pub fn pause(&self) -> Duration {
        self.to_safepoint + self.mark + self.compact
    }
}

/// `freed F of B bytes (L in use after: N objects and A arrays, P
/// padding), M moved; pause T (to the safepoint S, mark X, compact Y)`, and `; R bytes of memory given back` when some was.
impl std::fmt::Display for GcStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "freed {} of {} bytes ({} in use after: {} objects and {} arrays, {} bytes of padding), {} moved; pause {} µs (to the safepoint {} µs, mark {} µs, compact {} µs)",
            self.freed(),
            self.before,
            self.after,
            self.live_objects - self.live_arrays,
            self.live_arrays,
            self.padding,
            self.moved,
            self.pause().as_micros(),
            self.to_safepoint.as_micros(),
            self.mark.as_micros(),
            self.compact.as_micros()
        )?;
        if self.released > 0 {
            write!(f, "; {} bytes of memory given back", self.released)?;
        }
        Ok(())
    }
}

impl Heap {
    /// Collect the heap: keep what `roots` reach (and what that reaches),
    /// free the rest, and slide the survivors down so that eden's top is
    /// the end of the live data; `roots` are updated to the new addresses.
    /// `shapes` are the classes by global id (the size and reference
    /// offsets of each). Marking runs on the current rayon pool.
    ///
    /// A corrupt heap or root (a reference to no object, an unknown class)
    /// is an error found before anything moved: the heap is left as it was.
    ///
    /// # Safety
    ///
    /// The caller has the heap to itself for the whole call: no allocator
    /// holds an unretired TLAB (the heap parses up to its top), and no
    /// other thread reads or writes the heap or holds a reference into it
    /// that the roots do not show — objects move.
    pub unsafe fn collect(
        &self,
        shapes: &[ClassShape],
        roots: &mut dyn Roots,
    ) -> Result<GcStats, HeapError> {
        let t0 = Instant::now();
        // A mirrored heap: the device's writes come back first, and
        // everything below the new top goes to the device after (objects
        // moved).
        self.sync_host()?;
        let top = self.top_words();
        let cells = self
            .region
            .u32_cells(top as usize * 2)
            .ok_or(HeapError::OutOfRange(top as usize * 8))?;
        let mut st = GcStats {
            before: top * 8,
            ..GcStats::default()
        };
        let tracer = mark::Tracer::new(cells, shapes, top as u32);
        st.roots = tracer.mark(roots)?;
        let (marks, live, counted) = tracer.counted(&self.pages);
        let t_mark = Instant::now();
        st.mark = t_mark - t0;

        // Colour gaps are marked fillers, not objects: they count as
        // padding.
        st.live_objects = counted.objects - counted.gaps.len() as u64;
        st.live_arrays = counted.arrays;
        // The new address of each block of 64 words.
        let mut fwd =
            forward::Forwarding::build(&live, forward::merge_points(&counted.gaps, &counted.turns));
        let next = fwd.end;
        let padding = fwd.padding();
        st.padding = (padding + counted.gaps.len() as u64 * u64::from(mark::GAP_WORDS)) * 8;
        debug_assert_eq!(
            u64::from(next),
            u64::from(HEAP_START_WORDS) + counted.words + padding
        );
        drop(live);

        // What stays where it is: every live word below `still` (the
        // objects before the first one that moves). References to it are
        // not looked up, and the objects of its blocks have their
        // references updated in place; the rest's are updated as they
        // slide. Then the roots. With objects placed by class, a run of
        // pages of one class ends in a filler, so the heap's live data is
        // rarely dense from its start: a collection that moves nothing
        // still looked up every reference and stored it back.
        fwd.still = fwd.stays_below(&marks);
        let prefix = (fwd.still >> 6) as usize;
        mark::update_refs(cells, shapes, &marks, prefix, &|r| fwd.of(r));
        roots.visit(&mut |r| {
            if *r != 0 {
                *r = fwd.of(*r);
            }
        });

        // Where each run of one tag will lie, read before anything moves:
        // the first live object's and each turn's new address, with the
        // tag of the page it comes from. The pages of a run get its tag
        // after the slide, a page at a time (a turn starts a page).
        let runs: Vec<(u64, u32)> = marks
            .ones(0, marks.len())
            .next()
            .into_iter()
            .chain(counted.turns.iter().copied())
            .map(|r| (u64::from(fwd.of(r)), self.pages.tag_of(r)))
            .collect();
        let slide = slide::Slide {
            region: &self.region,
            cells,
            shapes,
            marks: &marks,
            fwd: &fwd,
            from_block: prefix,
        };
        // SAFETY: the caller has the heap to itself; the roots and the
        // dense prefix hold new addresses, nothing past it does yet.
        st.moved = unsafe { slide.run() } * 8;
        // Each run's pages get its tag; no page holds the starts of two
        // runs (a turn starts a page).
        for (i, &(start, tag)) in runs.iter().enumerate() {
            let end = runs.get(i + 1).map_or(u64::from(next), |r| r.0);
            self.pages.set(start, end, tag);
        }
        // Eden's top comes down to the live data; what lies above it is
        // zeroed by the carve that takes it (below the high-water mark).
        // The collection counts as a carve for every `HeapMark` taken
        // before it, so no reclaim rolls back across it.
        self.started.fetch_add(1, Ordering::SeqCst);
        self.lowered.fetch_add(1, Ordering::SeqCst);
        self.top.store(
            pack_top(u64::from(next), counted.last_tag.unwrap_or(FRESH)),
            Ordering::SeqCst,
        );
        // The host's open runs of pages per class ended in fillers, which
        // were garbage.
        self.host_runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.host_wrote(0, next as usize * 8);
        self.twins_widen();
        st.released = self.release_above(u64::from(next));
        self.finished.fetch_add(1, Ordering::SeqCst);
        st.after = u64::from(next) * 8;
        st.compact = t_mark.elapsed();
        Ok(st)
    }
}
