//! The heap: the region, eden, direct allocation, typed access, and the walker.

use crate::layout::{HEAP_START_WORDS, Header, Ref, words};
use crate::pages::{PageTable, page_up};
use crate::region::Region;
use crate::resident::Residency;
use crate::tlab::Eden;
use fixedbitset::FixedBitSet;
use offload_abi::pages::{MIXED, PAGE_WORDS};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sizes of a heap.
#[derive(Copy, Clone, Debug)]
pub struct HeapConfig {
    /// Bytes committed at start.
    pub initial: usize,
    /// Bytes the heap may grow to (at most 16 GiB).
    pub max: usize,
    /// Size of a TLAB in bytes.
    pub tlab_bytes: u32,
    /// How much to commit at a time when eden runs out (at least).
    pub grow_step: usize,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            initial: 64 << 20,
            max: 4 << 30,
            tlab_bytes: 32 << 10,
            grow_step: 64 << 20,
        }
    }
}

/// The largest heap: references are 32-bit word offsets, and the TLAB state
/// keeps headroom above `top`.
pub const MAX_HEAP_BYTES: usize = 16 << 30;

/// The smallest heap: one page, which holds the reserved words and the
/// first objects.
pub const MIN_HEAP_BYTES: usize = 4096;

/// A problem with the heap or an access to it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeapError {
    /// The configuration cannot work.
    #[error("bad heap configuration: {0}")]
    Config(String),
    /// The operating system refused to reserve or commit memory.
    #[error("cannot map heap memory: {0}")]
    Os(String),
    /// Eden is exhausted and the heap is at its maximum size.
    #[error("heap exhausted: {needed} bytes requested, {max} bytes maximum")]
    Exhausted {
        /// Bytes requested.
        needed: u64,
        /// The heap's maximum.
        max: usize,
    },
    /// One object or array larger than any object can be (its size must fit
    /// the 32-bit byte sizes the heap's headers and compiled code use).
    #[error("{what} would take {needed} bytes; one object or array can take at most {max} bytes")]
    TooLarge {
        /// What was asked for, in words (`an array of 5000000000 i64`).
        what: String,
        /// Bytes it would take, header included.
        needed: u64,
        /// The largest size of one object.
        max: u64,
    },
    /// An access outside the heap (a dangling or forged reference).
    #[error("heap access out of range at byte {0:#x}")]
    OutOfRange(usize),
    /// The device's copy of heap bytes could not be fetched (see
    /// [`crate::resident`]).
    #[error("cannot fetch heap bytes {:#x}..{:#x} from the device: {message}", bytes.start, bytes.end)]
    Device {
        /// The byte range being fetched.
        bytes: std::ops::Range<usize>,
        /// The device's error.
        message: String,
    },
    /// The heap does not parse.
    #[error("heap corrupt at word {at}: {what}")]
    Corrupt {
        /// Word offset of the bad object.
        at: u32,
        /// What is wrong.
        what: String,
    },
}

/// Statistics from a heap walk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Objects (class instances).
    pub objects: u64,
    /// Arrays.
    pub arrays: u64,
    /// Filler objects.
    pub fillers: u64,
    /// Bytes in fillers.
    pub filler_bytes: u64,
    /// Bytes walked.
    pub bytes: u64,
}

/// `N objects, N arrays, N fillers (B bytes); B bytes walked`.
impl std::fmt::Display for WalkStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} objects, {} arrays, {} fillers ({} bytes); {} bytes walked",
            self.objects, self.arrays, self.fillers, self.filler_bytes, self.bytes
        )
    }
}

/// What the heap verifier needs to know about a class: its size and the byte
/// offsets of its reference fields.
#[derive(Clone, Debug)]
pub struct ClassShape {
    /// Instance size in bytes.
    pub size: u32,
    /// Offsets of the reference fields.
    pub ref_offsets: Vec<u32>,
}

/// The managed heap.
///
/// What the runtime's roots no longer reach is freed by a collection
/// ([`Heap::collect`], at a safepoint). Between collections, what keeps
/// repeated launches from using fresh memory every time is
/// [`Heap::reclaim`]: a launch whose objects all died with it (none was
/// stored into an older object, which the launch's write barrier checks)
/// hands its memory back, if nothing else was carved from eden meanwhile. Memory carved again is zeroed by the carver (memory
/// never carved before is fresh, and zero).
#[derive(Debug)]
pub struct Heap {
    pub(crate) region: Region,
    cfg: HeapConfig,
    /// Eden's state: its top in words (low half) and the tag of the page
    /// that holds the top (high half), so that carves racing for one page
    /// agree on its tag (`crate::pages`). Read the top with
    /// [`Heap::top_words`].
    pub(crate) top: AtomicU64,
    /// The tag of every page (`crate::pages`).
    pub(crate) pages: PageTable,
    /// The host's open run of pages per tag (a class, or arrays): `[top, end)` words, the
    /// rest of the run always one filler (`crate::pages`).
    pub(crate) host_runs: Mutex<HashMap<u32, (u32, u32)>>,
    grows: AtomicU64,
    /// Carves (and reclaims) begun and finished: a [`HeapMark`] is taken
    /// when they are equal, and a reclaim needs every one since its mark
    /// to be the reclaiming allocator's own.
    pub(crate) started: AtomicU64,
    pub(crate) finished: AtomicU64,
    /// The highest top so far: memory below it may hold dead objects.
    high_water: AtomicU64,
    /// Serializes reclaims.
    reclaim_lock: Mutex<()>,
    /// Bytes reclaimed so far.
    reclaimed: AtomicU64,
    /// Times eden's top came down ([`Heap::top_lowered`]).
    pub(crate) lowered: AtomicU64,
    /// The device copy's coherence state ([`crate::resident`]).
    pub(crate) res: Residency,
    /// The twins of chunks device parts write (`twins.rs`; boxed: only
    /// split launches use them, and the heap's hot fields stay together).
    pub(crate) twins: Box<crate::twins::Twins>,
    /// Why the last carve failed when a fetch from the device did.
    carve_error: Mutex<Option<HeapError>>,
}

/// Eden's state at a point in time: what [`Heap::reclaim`] rolls back to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HeapMark {
    /// Eden top, in words: everything allocated after the mark lies above.
    pub top: u32,
    /// Eden's whole state word then (the top and its page's tag).
    state: u64,
    /// Carves and reclaims finished by then.
    events: u64,
}

impl Heap {
    /// Reserve a heap.
    pub fn new(cfg: HeapConfig) -> Result<Heap, HeapError> {
        if cfg.max > MAX_HEAP_BYTES {
            return Err(HeapError::Config(format!(
                "maximum {} bytes exceeds {MAX_HEAP_BYTES}",
                cfg.max
            )));
        }
        if cfg.max < MIN_HEAP_BYTES {
            return Err(HeapError::Config(format!(
                "maximum {} bytes is below the smallest heap, {MIN_HEAP_BYTES} bytes",
                cfg.max
            )));
        }
        if cfg.initial > cfg.max {
            return Err(HeapError::Config(format!(
                "initial size {} bytes exceeds the maximum, {} bytes",
                cfg.initial, cfg.max
            )));
        }
        if cfg.tlab_bytes < 64 || !cfg.tlab_bytes.is_multiple_of(8) {
            return Err(HeapError::Config(format!(
                "a TLAB of {} bytes: it must be a multiple of 8, at least 64",
                cfg.tlab_bytes
            )));
        }
        if cfg.tlab_bytes as usize > cfg.max / 2 {
            return Err(HeapError::Config(format!(
                "a TLAB of {} bytes does not fit twice in the maximum heap of {} bytes",
                cfg.tlab_bytes, cfg.max
            )));
        }
        let region = Region::reserve(cfg.max, cfg.initial.max(4096))
            .map_err(|e| HeapError::Os(e.to_string()))?;
        Ok(Heap {
            region,
            cfg,
            top: AtomicU64::new(pack_top(u64::from(HEAP_START_WORDS), FRESH)),
            pages: PageTable::new(cfg.max),
            host_runs: Mutex::new(HashMap::new()),
            grows: AtomicU64::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            high_water: AtomicU64::new(u64::from(HEAP_START_WORDS)),
            reclaim_lock: Mutex::new(()),
            reclaimed: AtomicU64::new(0),
            lowered: AtomicU64::new(0),
            res: Residency::new(cfg.max),
            twins: Default::default(),
            carve_error: Mutex::new(None),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &HeapConfig {
        &self.cfg
    }

    /// The address of the heap's first byte. Outside this crate, raw access
    /// goes through [`Heap::raw_image`] (which brings the host's image up
    /// to date first) or [`Heap::host_bytes`].
    pub(crate) fn base_ptr(&self) -> *mut u8 {
        self.region.base_ptr()
    }

    /// Bytes committed now.
    pub fn committed(&self) -> usize {
        self.region.committed()
    }

    /// Bytes allocated (eden top).
    pub fn used(&self) -> u64 {
        self.top_words() * 8
    }

    /// Eden's top, in words.
    #[inline]
    pub fn top_words(&self) -> u64 {
        self.top.load(Ordering::Acquire) & TOP_MASK
    }

    /// The tag of every page (`crate::pages`), for compiled code and the
    /// devices.
    pub fn pages(&self) -> &PageTable {
        &self.pages
    }

    /// How many times the heap grew.
    pub fn grow_count(&self) -> u64 {
        self.grows.load(Ordering::Relaxed)
    }

    fn limit_words(&self) -> u64 {
        (self.region.committed() / 8) as u64
    }

    /// After a collection left eden's top at `top_words`: give back the
    /// committed memory above what the heap keeps, the larger of its
    /// initial size and twice what is in use — once committed memory is at
    /// least half as much again as that, so that a heap whose use swings
    /// does not commit and give back at every collection. Memory given
    /// back reads as zero when committed again, so the high-water mark
    /// comes down with it. A heap with a device copy keeps its memory (the
    /// copy is sized by it). Returns the bytes given back.
    pub(crate) fn release_above(&self, top_words: u64) -> u64 {
        if self.is_mirrored() {
            return 0;
        }
        let old = self.region.committed() as u64;
        let keep = (top_words * 8 * 2).max(self.cfg.initial as u64);
        if old < keep + keep / 2 {
            return 0;
        }
        match self.region.shrink_to(keep as usize) {
            Ok(now) => {
                self.high_water
                    .fetch_min((now / 8) as u64, Ordering::SeqCst);
                old - now as u64
            }
            Err(_) => 0,
        }
    }

    /// Commit more memory so that at least `need_words` more fit above the
    /// current top. Returns false at the maximum.
    fn grow(&self, need_words: u64) -> bool {
        let want = (self.top_words() + need_words) * 8;
        let cur = self.region.committed() as u64;
        if want <= cur {
            return true;
        }
        let target = want.max(cur + self.cfg.grow_step as u64);
        match self.region.grow_to(target as usize) {
            Ok(now) if now as u64 >= want => {
                self.grows.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// Carve `[start, start + want)` words from eden (at least `min`) for
    /// pages of `tag` (`crate::pages`), growing the heap if allowed: from
    /// eden's top when its page has that tag or the top is on a page
    /// boundary, else from the next page boundary (the gap becomes a
    /// filler). Every page the carve touches gets `tag`. The words are zero
    /// on the host (`for_device`: the caller zeroes them on the device, and
    /// the host's are meaningless until the device's come back).
    pub(crate) fn carve_words(
        &self,
        min: u64,
        want: u64,
        grow: bool,
        for_device: bool,
        tag: u32,
    ) -> Option<(u64, u64)> {
        self.carve_words_at(min, want, grow, for_device, tag, false)
    }

    /// [`Heap::carve_words`], starting on a page boundary when `paged`.
    fn carve_words_at(
        &self,
        min: u64,
        want: u64,
        grow: bool,
        for_device: bool,
        tag: u32,
        paged: bool,
    ) -> Option<(u64, u64)> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let got = loop {
            let state = self.top.load(Ordering::SeqCst);
            let (top, top_tag) = unpack_top(state);
            if !for_device && let Err(e) = self.before_carve(top) {
                *self
                    .carve_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                break None;
            }
            let start = if !paged && (top_tag == tag || top_tag == FRESH) {
                top
            } else {
                page_up(top)
            };
            let limit = self.limit_words();
            // A carve with slack ends on a page boundary when it can keep
            // at least half of what it wanted, so that the next carve of
            // another tag does not leave most of a page behind.
            let mut end = (start + want).min(limit);
            let aligned = end & !u64::from(PAGE_WORDS - 1);
            if aligned >= start + min && aligned - start >= want / 2 {
                end = aligned;
            }
            if end < start + min {
                let gap = start - top;
                if grow && self.grow(gap + want) {
                    continue;
                }
                if grow && self.grow(gap + min) {
                    continue;
                }
                break None;
            }
            if self
                .top
                .compare_exchange_weak(
                    state,
                    pack_top(end, tag),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
            {
                break Some((top, start, end));
            }
        };
        if let Some((top, start, end)) = got {
            // Below the high-water mark lie the objects of a reclaimed
            // launch; above it, memory no one has written.
            let dirty_end = self.high_water.fetch_max(end, Ordering::SeqCst).min(end);
            let twinned = self.twins.on();
            if twinned {
                // A split launch's parts on devices may be writing other
                // bytes of the chunks this carve changes (`twins`): the
                // gap to the page boundary, and a host carve's zeroes.
                let changed = if for_device { start } else { end };
                self.twin_before_change(crate::resident::chunks_of(
                    top as usize * 8,
                    changed as usize * 8,
                ));
            }
            if for_device && twinned {
                self.zero_device_edges(start, end, dirty_end);
            }
            if !for_device && top < dirty_end {
                // SAFETY: the CAS above made `[top, end)` this carve's
                // alone; no one else reads or writes it until the caller
                // publishes objects in it, and a reclaim cannot move `top`
                // below it while this carve is unfinished.
                unsafe {
                    self.region
                        .zero(top as usize * 8, (dirty_end - top) as usize * 8);
                }
            }
            self.pages.set(start, end, tag);
            if top < start {
                // The gap to the page boundary parses as a filler (host
                // memory even for a device's carve: it is not the device's).
                Eden::fill(self, top as u32, start as u32);
                if for_device {
                    self.host_wrote(top as usize * 8, start as usize * 8);
                }
            }
            if !for_device {
                self.host_wrote(top as usize * 8, end as usize * 8);
            }
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        got.map(|(_, start, end)| (start, end))
    }

    /// A device eden `[start, end)` (words) carved in twin mode: the host's
    /// bytes of it in the chunks at its two edges are zeroed (below
    /// `dirty_end`, where old objects may lie) and marked written. A
    /// split launch's part registers those chunks — the rest of each is
    /// other devices' — and every send of them goes from the host's bytes,
    /// which must then hold what the device's zeroed eden holds: a send
    /// while the kernel runs (a CPU part's raw image is live) would
    /// otherwise put old bytes where the kernel has not allocated yet.
    /// The chunks wholly inside are the device's alone and never sent to
    /// it (`cuda/grid.rs`).
    fn zero_device_edges(&self, start: u64, end: u64, dirty_end: u64) {
        use crate::resident::{CHUNK_BYTES, chunks_of, chunks_within};
        let (a, b) = (start as usize * 8, end as usize * 8);
        let dirty = (dirty_end as usize * 8).min(b);
        // The chunks wholly inside are sent to no one; a twin of one from
        // before (a collection since lowered the top) is not the bytes
        // the host has there, and a fetch merging against it would keep
        // old bytes where the device's new objects hold zeroes.
        let inside = chunks_within(a, b);
        if !inside.is_empty() {
            self.forget_twins(inside);
        }
        // The first and the last chunk it touches (one, when they are one).
        let all = chunks_of(a, b);
        let edges = [all.start, all.end.saturating_sub(1)];
        for c in edges.into_iter().take(all.len().min(2)) {
            let e = a.max(c * CHUNK_BYTES)..b.min((c + 1) * CHUNK_BYTES);
            self.twin_before_change(c..c + 1);
            let z = e.start..e.end.min(dirty);
            if z.start < z.end {
                // SAFETY: the carve's CAS made `[start, end)` its caller's
                // alone, and the device that will write it has not been
                // handed it yet.
                unsafe { self.region.zero(z.start, z.end - z.start) };
            }
            self.host_wrote(e.start, e.end);
        }
    }

    /// The highest top so far, in words.
    pub(crate) fn high_water(&self) -> u64 {
        self.high_water.load(Ordering::SeqCst)
    }

    /// Eden's state now, for a later [`Heap::reclaim`]: taken between
    /// carves, so that every carve is either before it (below its top) or
    /// counted after it.
    pub fn mark(&self) -> HeapMark {
        loop {
            let f = self.finished.load(Ordering::SeqCst);
            let state = self.top.load(Ordering::SeqCst);
            if self.started.load(Ordering::SeqCst) == f {
                return HeapMark {
                    top: unpack_top(state).0 as u32,
                    state,
                    events: f,
                };
            }
            std::hint::spin_loop();
        }
    }

    /// Free everything allocated since `mark`, if the `own` carves made
    /// since (counting failed ones) are all the carves there were: no other
    /// allocator or host allocation carved, and nothing was reclaimed. The
    /// caller vouches that no object allocated since `mark` is reachable.
    /// Returns the bytes freed (0 when it cannot).
    pub fn reclaim(&self, mark: HeapMark, own: u64) -> u64 {
        let _one = self
            .reclaim_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let s = self.started.load(Ordering::SeqCst);
        if s != mark.events + own {
            return 0;
        }
        let cur = self.top.load(Ordering::SeqCst);
        if self.finished.load(Ordering::SeqCst) != s || cur & TOP_MASK <= u64::from(mark.top) {
            return 0;
        }
        // A reclaim counts as a carve for every other mark. A carve that
        // began after `s` was read moves `top` from `cur`, and then this
        // exchange fails; one that reads `top` after it carves from the
        // mark, and zeroes what it takes.
        self.started.fetch_add(1, Ordering::SeqCst);
        let freed = self
            .top
            .compare_exchange(cur, mark.state, Ordering::SeqCst, Ordering::SeqCst)
            .map_or(0, |_| ((cur & TOP_MASK) - u64::from(mark.top)) * 8);
        if freed > 0 {
            self.lowered.fetch_add(1, Ordering::SeqCst);
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        self.reclaimed.fetch_add(freed, Ordering::Relaxed);
        freed
    }

    /// How many times eden's top has come down — a collection, a
    /// [`Heap::reclaim`], a [`Heap::give_back`] — the only ways memory
    /// below it is used again. While this is unchanged, an address names
    /// the object it named before (so facts about it, its size say, stay
    /// true).
    pub fn top_lowered(&self) -> u64 {
        self.lowered.load(Ordering::SeqCst)
    }

    /// Bytes [`Heap::reclaim`] has freed so far.
    pub fn reclaimed(&self) -> u64 {
        self.reclaimed.load(Ordering::Relaxed)
    }

    /// Take `[start, end)` words of eden (at least `min_words`, at most
    /// `want_words`), growing the heap if needed: the zeroed region a device
    /// allocates from during a launch (its own eden). The caller must leave
    /// it parsable, with objects and a filler over the unused rest
    /// ([`Eden::fill`]). Its pages get `tag` (`crate::pages`): everything
    /// the caller places there must be of that tag. `None` when not even
    /// `min_words` fit.
    pub fn carve_region(&self, min_words: u32, want_words: u32, tag: u32) -> Option<(u32, u32)> {
        self.carve_words(
            u64::from(min_words),
            u64::from(want_words.max(min_words)),
            true,
            false,
            tag,
        )
        .map(|(s, e)| (s as u32, e as u32))
    }

    /// [`Heap::carve_region`] for a device eden on a mirrored heap: the
    /// host does not zero the region (the device zeroes its copy), and it
    /// is not marked for the device. After the launch the device marks
    /// what it allocated ([`Heap::device_wrote`]) and hands the rest back
    /// ([`Heap::give_back`]). Its pages get `tag`, as with
    /// [`Heap::carve_region`]; it starts on a page boundary when `paged`
    /// (a device that carves whole pages from it, and tags some).
    pub fn carve_device_region(
        &self,
        min_words: u32,
        want_words: u32,
        tag: u32,
        paged: bool,
    ) -> Option<(u32, u32)> {
        self.carve_words_at(
            u64::from(min_words),
            u64::from(want_words.max(min_words)),
            true,
            true,
            tag,
            paged,
        )
        .map(|(s, e)| (s as u32, e as u32))
    }

    /// Hand back `[start, end)`, the unused top of a region this caller
    /// carved (a device eden after its launch), when nothing was carved
    /// above it since: eden's top returns to `start`. Returns whether it
    /// did; when it did not, the caller fills the range instead. Counts as
    /// a carve for every [`Heap::mark`] taken before it.
    pub fn give_back(&self, start: u32, end: u32) -> bool {
        if start >= end {
            return false;
        }
        let _one = self
            .reclaim_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.started.fetch_add(1, Ordering::SeqCst);
        // Eden's top goes back to `start` with the tag its page had (the
        // region's own: `start` lies in it, or on its first page).
        let state = self.top.load(Ordering::SeqCst);
        let (top, tag) = unpack_top(state);
        let ok = top == u64::from(end)
            && self
                .top
                .compare_exchange(
                    state,
                    pack_top(u64::from(start), tag),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok();
        if ok {
            self.lowered.fetch_add(1, Ordering::SeqCst);
        }
        self.finished.fetch_add(1, Ordering::SeqCst);
        ok
    }

    /// Allocate `bytes` straight from eden with a CAS (large objects, host
    /// allocations, and the `EdenCas` policy) on [`MIXED`] pages, growing
    /// the heap if needed. Returns the word offset; the memory is zero.
    pub fn alloc_direct(&self, bytes: u64) -> Result<u32, HeapError> {
        self.alloc_direct_on(bytes, MIXED)
    }

    /// [`Heap::alloc_direct`] on pages of `tag` (`crate::pages`).
    pub fn alloc_direct_on(&self, bytes: u64, tag: u32) -> Result<u32, HeapError> {
        let w = words(bytes);
        self.carve_words(w, w, true, false, tag)
            .map(|(s, _)| s as u32)
            .ok_or_else(|| {
                let failed = self
                    .carve_error
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                failed.unwrap_or(HeapError::Exhausted {
                    needed: bytes,
                    max: self.cfg.max,
                })
            })
    }

    /// Write a header at word `at`.
    pub fn write_header(&self, at: u32, h: Header) -> Result<(), HeapError> {
        let (a, b) = h.encode().ok_or_else(|| HeapError::Corrupt {
            at,
            what: format!("unencodable header: {h}"),
        })?;
        let off = at as usize * 8;
        let _gate = self.writable(off, 8)?;
        self.cell32(off)?.store(a, Ordering::Relaxed);
        self.cell32(off + 4)?.store(b, Ordering::Relaxed);
        Ok(())
    }

    /// Read the header of the object at `r`.
    pub fn header(&self, r: Ref) -> Result<Header, HeapError> {
        let off = r.byte_offset();
        self.fetch(off, 8)?;
        let a = self.cell32(off)?.load(Ordering::Relaxed);
        let b = self.cell32(off + 4)?.load(Ordering::Relaxed);
        Header::decode(a, b).ok_or_else(|| HeapError::Corrupt {
            at: r.0,
            what: format!("bad header {a:#x} {b:#x}"),
        })
    }

    /// The header of the object at `r`, without fetching the chunk that
    /// holds it: where a device wrote the chunk, its 8 bytes are read from
    /// the device's image (one small copy) and the chunk stays host-stale.
    /// For a launch that sizes its arrays while another kernel may be
    /// writing beside them (the device's `share.rs`).
    pub fn peek_header(&self, r: Ref) -> Result<Header, HeapError> {
        let off = r.byte_offset();
        let (a, b) = match self.peek_device(off)? {
            Some(w) => (w as u32, (w >> 32) as u32),
            None => (
                self.cell32(off)?.load(Ordering::Relaxed),
                self.cell32(off + 4)?.load(Ordering::Relaxed),
            ),
        };
        Header::decode(a, b).ok_or_else(|| HeapError::Corrupt {
            at: r.0,
            what: format!("bad header {a:#x} {b:#x}"),
        })
    }

    #[inline]
    fn cell32(&self, off: usize) -> Result<&std::sync::atomic::AtomicU32, HeapError> {
        self.region.u32_at(off).ok_or(HeapError::OutOfRange(off))
    }

    #[inline]
    fn cell64(&self, off: usize) -> Result<&AtomicU64, HeapError> {
        self.region.u64_at(off).ok_or(HeapError::OutOfRange(off))
    }

    /// The 32-bit cell at byte offset `off` from the heap base, for an
    /// atomic read-modify-write (on a mirrored heap the cell is fetched
    /// and marked written).
    #[inline]
    pub fn u32_cell(&self, off: usize) -> Result<&std::sync::atomic::AtomicU32, HeapError> {
        let cell = self.cell32(off)?;
        // Twins are taken, but not merged atomically: a split launch
        // refuses kernels with atomics (`twins`).
        drop(self.writable(off, 4)?);
        Ok(cell)
    }

    /// The 64-bit cell at byte offset `off` (8-aligned), for an atomic
    /// read-modify-write.
    #[inline]
    pub fn u64_cell(&self, off: usize) -> Result<&AtomicU64, HeapError> {
        let cell = self.cell64(off)?;
        drop(self.writable(off, 8)?);
        Ok(cell)
    }

    /// Load 32 bits (relaxed).
    #[inline]
    pub fn load32(&self, off: usize) -> Result<u32, HeapError> {
        let cell = self.cell32(off)?;
        self.fetch(off, 4)?;
        Ok(cell.load(Ordering::Relaxed))
    }
    /// Store 32 bits (relaxed).
    #[inline]
    pub fn store32(&self, off: usize, v: u32) -> Result<(), HeapError> {
        let cell = self.cell32(off)?;
        let _gate = self.writable(off, 4)?;
        cell.store(v, Ordering::Relaxed);
        Ok(())
    }
    /// Load 64 bits (relaxed).
    #[inline]
    pub fn load64(&self, off: usize) -> Result<u64, HeapError> {
        let cell = self.cell64(off)?;
        self.fetch(off, 8)?;
        Ok(cell.load(Ordering::Relaxed))
    }
    /// Store 64 bits (relaxed).
    #[inline]
    pub fn store64(&self, off: usize, v: u64) -> Result<(), HeapError> {
        let cell = self.cell64(off)?;
        let _gate = self.writable(off, 8)?;
        cell.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// Walk the heap from its start to eden's top, object by object. Call
    /// only when no allocator holds an unretired TLAB.
    pub fn walk(&self, mut visit: impl FnMut(Ref, Header)) -> Result<WalkStats, HeapError> {
        self.sync_host()?;
        let top = self.top_words();
        let mut at = u64::from(HEAP_START_WORDS);
        let mut st = WalkStats::default();
        while at < top {
            let r = Ref(at as u32);
            let h = self.header(r)?;
            let size = h.size().ok_or_else(|| HeapError::Corrupt {
                at: r.0,
                what: "array too large".into(),
            })?;
            if size < 8 || size % 8 != 0 || at + size / 8 > top {
                return Err(HeapError::Corrupt {
                    at: r.0,
                    what: format!("{h} has bad size {size} (top at word {top})"),
                });
            }
            match h {
                Header::Object { .. } => st.objects += 1,
                Header::Array { .. } => st.arrays += 1,
                Header::Filler { size } => {
                    st.fillers += 1;
                    st.filler_bytes += u64::from(size);
                }
            }
            st.bytes += size;
            visit(r, h);
            at += size / 8;
        }
        Ok(st)
    }

    /// Walk the heap and check it: every header is valid, objects have the
    /// size of their class and lie on pages of their tag
    /// ([`Heap::check_pages`]), and every reference field and element is
    /// null or points at the start of an object.
    pub fn verify(
        &self,
        class_shape: impl Fn(u32) -> Option<ClassShape>,
    ) -> Result<WalkStats, HeapError> {
        let top = self.top_words() as usize;
        let mut starts = FixedBitSet::with_capacity(top + 1);
        let mut refs: Vec<(u32, usize)> = Vec::new();
        let mut err = None;
        let stats = self.walk(|r, h| {
            if err.is_some() {
                return;
            }
            starts.insert(r.0 as usize);
            if let Some(e) = self.misplaced(r.0, h) {
                err = Some(e);
                return;
            }
            match h {
                Header::Object { class, size } => match class_shape(class) {
                    Some(shape) if shape.size == size => {
                        refs.extend(
                            shape
                                .ref_offsets
                                .iter()
                                .map(|&o| (r.0, r.byte_offset() + o as usize)),
                        );
                    }
                    Some(shape) => {
                        err = Some(HeapError::Corrupt {
                            at: r.0,
                            what: format!(
                                "class {class} has size {} but header says {size}",
                                shape.size
                            ),
                        })
                    }
                    None => {
                        err = Some(HeapError::Corrupt {
                            at: r.0,
                            what: format!("unknown class {class}"),
                        })
                    }
                },
                Header::Array { elem, dims, len } => {
                    if crate::layout::array_elem_kind(elem, dims) == offload_ir::Kind::Ref {
                        refs.extend((0..len as usize).map(|i| (r.0, r.byte_offset() + 8 + 4 * i)));
                    }
                }
                Header::Filler { .. } => {}
            }
        })?;
        if let Some(e) = err {
            return Err(e);
        }
        for (owner, off) in refs {
            let v = self.load32(off)? as usize;
            if v != 0 && (v > top || !starts.contains(v)) {
                return Err(HeapError::Corrupt {
                    at: owner,
                    what: format!("reference at byte {off:#x} points at word {v}, not an object"),
                });
            }
        }
        Ok(stats)
    }
}

/// Eden as seen by TLAB slots: carving grows the heap when it can.
impl Eden for Heap {
    fn carve(&self, min_words: u32) -> Result<(u32, u32), crate::AllocFailure> {
        let want = u64::from(self.cfg.tlab_bytes / 8).max(u64::from(min_words));
        self.carve_words(u64::from(min_words), want, true, false, MIXED)
            .map(|(s, e)| (s as u32, e as u32))
            .ok_or(crate::AllocFailure::Exhausted)
    }

    fn fill(&self, start: u32, end: u32) {
        let size = (end - start) * 8;
        // The range lies inside a TLAB carved from committed memory, so the
        // write cannot fail; a failure would mean a corrupt TLAB state.
        self.write_header(start, Header::Filler { size })
            .expect("filler inside a carved TLAB");
    }
}

/// The tag in eden's state word while no object starts in the top's page
/// (the heap's first page, which holds only the reserved words): any
/// carve continues there. Never in the page table.
pub(crate) const FRESH: u32 = 0x8000_0001;

/// Bits of eden's state word that hold its top.
pub(crate) const TOP_MASK: u64 = 0xFFFF_FFFF;

/// Eden's state word: `top` words and the tag of the page that holds it.
pub(crate) fn pack_top(top: u64, tag: u32) -> u64 {
    u64::from(tag) << 32 | top
}

/// `(top, tag)` of eden's state word.
pub(crate) fn unpack_top(state: u64) -> (u64, u32) {
    (state & TOP_MASK, (state >> 32) as u32)
}
