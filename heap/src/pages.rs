//! Objects placed by class, and the table that says where (BiBoP / COAL).
//!
//! # Why
//!
//! A virtual call, a guarded inline, `instanceof` and `checkcast` need the
//! receiver's class. Read from the object's header, that is one load per
//! object before the call can even be chosen, and on a GPU a warp whose 32
//! receivers are 32 objects makes 32 scattered loads for it. "Judging a
//! Type by Its Pointer" (ASPLOS '21, seed 003) measured that load as most
//! of a GPU virtual call's cost; its COAL allocates each type's objects in
//! ranges of their own, so the type follows from the address through a
//! small table every thread shares, and gains 80% over CUDA's virtual
//! calls. Language runtimes have done the same for decades as BiBoP ("big
//! bag of pages": the page an object lives on names its type). offload owns
//! its allocator, its TLABs and its collector, so it keeps the placement
//! across compactions instead of bolting it onto someone else's allocator.
//!
//! # The design
//!
//! - **Pages, not ranges.** The heap is cut into pages of
//!   [`offload_abi::pages::PAGE_WORDS`] words (2 KiB), and the
//!   [`PageTable`] keeps one tag per page (see [`offload_abi::pages`] for
//!   the tags). COAL's range table needs a search (a few compares per
//!   call); a page table needs a shift and one load, and at 2 KiB pages
//!   the table is 1/512 of the heap — 48 entries (192 bytes, two cache
//!   lines) cover a scene of 2,000 small objects, so it stays in every
//!   cache level. What placement wastes is the unfilled rest of each tag's
//!   last page, about half a page per class in use: measured on the ray
//!   caster's scene of 2,000 shapes of 6 classes, 4 KiB pages left 12.6%
//!   of the heap unused (9.1% after a collection), 2 KiB pages half that
//!   (BENCHMARKS.md, issue 48). Pages of 1 KiB would halve it again but
//!   double a table that is initialized for the heap's whole reservation
//!   (8 MiB for the default 4 GiB).
//! - **Eden carves by tag.** Every carve from eden says what it is for
//!   (a class, arrays, or mixed TLABs). It continues in the page that
//!   holds eden's top when that page has its tag, and starts on the next
//!   page boundary otherwise (the gap becomes a filler). The tag of the
//!   top's page is packed with the top in eden's one atomic word, so two
//!   carves racing for one page always agree on it; each carve tags every
//!   page it touches before it hands out memory.
//! - **The host allocates by class** ([`crate::Allocator::alloc_host`],
//!   `crate::placement`):
//!   each class has an open run of pages of its own; the rest of a run is
//!   always one filler, so the heap parses at every moment. Arrays go to
//!   [`ARRAYS`] pages, packed one after another.
//! - **A launch allocates by kind** (`offload_program::Program::
//!   allocation_kinds`). Every class a kernel may make (in it or in any
//!   function it may call) that has a superclass or a subclass is a kind of
//!   its own: only there can the class a dispatch needs differ between
//!   objects of one static type. Everything else (arrays, whose tests read
//!   the header, and classes alone in their hierarchy) shares one mixed
//!   kind, first in the list. A launch's allocator has a TLAB per kind per
//!   slot (group) and per worker buffer, each carved from pages of its
//!   kind's tag ([`crate::Allocator::with_kinds`]); compiled code picks an
//!   allocation site's TLAB by its kind's position
//!   (`LaunchCtx::tlabs[slot * kinds + kind]`), the interpreter by the
//!   object's header, through the one rule [`crate::alloc::kind_of`].
//!   The mixed kind keeps what a launch had before: the fast path's TLAB
//!   state in a register and the per-workitem nursery reset; a class kind
//!   takes the shared protocol's atomic add on its TLAB's memory word,
//!   and a workitem that makes one is not reset. A class kind's TLABs
//!   start at a page and double with each refill up to the mixed kind's
//!   size ([`crate::alloc::CLASS_KIND_DOUBLINGS`]; per kind on the host,
//!   per TLAB on the GPU), so that the kinds a launch makes few of leave
//!   little behind in their TLABs' unused rests. A kernel that makes only
//!   mixed-kind things (most do) allocates exactly as before. On the GPU
//!   (`offload_jit::ptx` alloc) each slot group has a TLAB per kind too:
//!   with one kind the host carves the device eden from pages of its tag;
//!   with several it carves it from mixed pages starting on a page
//!   boundary, the device carves whole pages from it, and the carver of
//!   pages for a class writes the class into the device's copy of the
//!   table before it publishes them; the host takes those tags back into
//!   its table after the launch (`DeviceHeap::fetch_pages`). At
//!   most `offload_program::MAX_ALLOCATION_KINDS` kinds; beyond, one
//!   mixed kind. An object whose tag is not among the kinds (only a
//!   large object can be: compiled code makes only what the kernel's
//!   instructions say) goes to pages of its own tag.
//! - **The collector keeps the placement** (`Heap::collect`): it slides
//!   objects down in address order as before, but where the tag of the
//!   page an object comes from changes it starts a new page, so objects
//!   of different tags never share a page, and it sets the tag of every
//!   page it fills. Pages above the new top return to eden.
//!
//! The header stays in every object: the host, the verifier and the heap
//! walker read it, and [`Heap::check_pages`](crate::Heap::check_pages)
//! checks the table against it.

use crate::layout::Header;
pub use offload_abi::pages::{
    ARRAYS, MIXED, PAGE_BYTES, PAGE_SHIFT, PAGE_WORDS, names_class, page_of,
};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One tag per page of the heap's reservation.
#[derive(Debug)]
pub struct PageTable {
    tags: Box<[AtomicU32]>,
    /// Bumped by every [`PageTable::set`] that changed a tag: a device's
    /// copy of the table is current while it holds the version it copied.
    version: AtomicU64,
}

impl PageTable {
    /// A table for a heap of at most `max_bytes`, every page [`MIXED`].
    pub(crate) fn new(max_bytes: usize) -> PageTable {
        let n = max_bytes.div_ceil(PAGE_BYTES).max(1);
        PageTable {
            tags: (0..n).map(|_| AtomicU32::new(MIXED)).collect(),
            version: AtomicU64::new(0),
        }
    }

    /// The tag of page `p` ([`MIXED`] past the table's end).
    #[inline]
    pub fn tag(&self, p: usize) -> u32 {
        self.tags
            .get(p)
            .map_or(MIXED, |t| t.load(Ordering::Relaxed))
    }

    /// The tag of the page where the object at word `r` starts.
    #[inline]
    pub fn tag_of(&self, r: u32) -> u32 {
        self.tag(page_of(r))
    }

    /// Tag the pages that words `[start, end)` touch.
    pub(crate) fn set(&self, start: u64, end: u64, tag: u32) {
        if end <= start {
            return;
        }
        let first = (start / u64::from(PAGE_WORDS)) as usize;
        let last = ((end - 1) / u64::from(PAGE_WORDS)) as usize;
        let mut changed = false;
        for t in self.tags.iter().take(last + 1).skip(first) {
            // Racing carves of one page agree on its tag: a plain store
            // where it differs (most pages already have it).
            if t.load(Ordering::Relaxed) != tag {
                t.store(tag, Ordering::Release);
                changed = true;
            }
        }
        if changed {
            self.version.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Set the tags of pages `first..first + tags.len()` (what a device
    /// wrote into its copy of the table for the pages it carved, taken
    /// back after its launch).
    pub fn set_pages(&self, first: usize, tags: &[u32]) {
        let mut changed = false;
        for (t, &tag) in self.tags.iter().skip(first).zip(tags) {
            if t.load(Ordering::Relaxed) != tag {
                t.store(tag, Ordering::Release);
                changed = true;
            }
        }
        if changed {
            self.version.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The table's version: it changes whenever a tag does.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// The table's first entry, for compiled code (which reads it with
    /// plain loads: a tag changes only while no kernel runs on its page).
    pub fn as_ptr(&self) -> *const u32 {
        self.tags.as_ptr().cast()
    }

    /// Pages in the table.
    pub fn len(&self) -> usize {
        self.tags.len()
    }

    /// Whether the table has no pages (never: every heap has one).
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }

    /// The tags of pages `[0, n)` as plain words (what a device copies).
    pub fn snapshot(&self, n: usize) -> Vec<u32> {
        self.tags
            .iter()
            .take(n)
            .map(|t| t.load(Ordering::Acquire))
            .collect()
    }
}

/// The tag of the pages an object with header `h` may be placed on by
/// its kind: its class, or [`ARRAYS`]; fillers go anywhere.
pub fn tag_for(h: Header) -> Option<u32> {
    match h {
        Header::Object { class, .. } => names_class(class).then_some(class),
        Header::Array { .. } => Some(ARRAYS),
        Header::Filler { .. } => None,
    }
}

/// Round a word offset up to a page boundary.
pub(crate) fn page_up(w: u64) -> u64 {
    w.next_multiple_of(u64::from(PAGE_WORDS))
}

/// How the heap's pages are used, by tag ([`Heap::page_stats`](crate::Heap::page_stats)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageStats {
    /// Per tag, in tag order: the pages whose objects start there with
    /// that tag, and what is in them.
    pub kinds: Vec<PageKind>,
}

/// The pages of one tag.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageKind {
    /// The tag (a class id, [`ARRAYS`] or [`MIXED`]).
    pub tag: u32,
    /// Pages counted to this tag: each page the heap's blocks (objects
    /// and fillers) cover below the top, once, to the tag of the page
    /// where the block covering its start begins. The kinds' pages add
    /// up to the pages in use.
    pub pages: u64,
    /// Objects (instances and arrays) starting in those pages.
    pub objects: u64,
    /// Bytes of those objects (an object that runs past its page counts
    /// whole).
    pub object_bytes: u64,
    /// Bytes of fillers starting on pages of this tag: the space the
    /// placement (and retired TLABs) leave unused. Objects and fillers
    /// of every kind add up to the heap's bytes in use.
    pub filler_bytes: u64,
}

impl PageStats {
    /// Bytes of fillers in every kind.
    pub fn filler_bytes(&self) -> u64 {
        self.kinds.iter().map(|k| k.filler_bytes).sum()
    }

    /// Bytes of objects in every kind.
    pub fn object_bytes(&self) -> u64 {
        self.kinds.iter().map(|k| k.object_bytes).sum()
    }
}

/// `class 7`, `arrays`, `mixed`.
pub fn tag_name(tag: u32) -> String {
    match tag {
        MIXED => "mixed".into(),
        ARRAYS => "arrays".into(),
        c if names_class(c) => format!("class {c}"),
        other => format!("tag {other:#x}"),
    }
}
