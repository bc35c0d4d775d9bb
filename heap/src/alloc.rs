//! Allocation for one launch: the policy knob and its slots.
//!
//! # Allocation buffers (a worker's part of a shared TLAB)
//!
//! A TLAB shared by a group of workers costs one atomic add on its state
//! word per object, and on a CPU the cores of a group pass that word's
//! cache line back and forth: with two workers per TLAB, 93% of a list
//! kernel's time was that `lock xadd`, and it ran 5 to 40 times slower
//! than with a TLAB per worker. So on groups of more than one worker, each worker
//! allocates from an **allocation buffer** of its own — a [`SharedTlab`]
//! that only it uses, which compiled code bumps with plain loads and stores
//! like a private TLAB — and the buffer's refill takes its next
//! [`Allocator::large_words`] words (a quarter TLAB) from the group's
//! shared TLAB as one allocation through the designated-refiller protocol
//! (and so the group's refills from eden, its waits and its failures are
//! Sumatra's, one level up). This is the CPU's counterpart of the GPU's
//! warp-aggregated allocation (docs/DESIGN.md, "Allocation"): one add reserves
//! room for many objects. A retired buffer's tail becomes a filler like a
//! TLAB's, so the heap parses; at most a buffer per worker is wasted.
//! [`Allocator::with_buffers`] turns buffers off for experiments on the
//! per-object protocol.

use crate::heap::{Heap, HeapError, HeapMark};
use crate::layout::{Header, words};
use crate::tlab::{AllocFailure, Eden, RefillFault, SharedTlab};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Host allocations of at least this many bytes are placed apart from the
/// one before ([`Allocator::alloc_host`]).
pub const COLOUR_MIN_BYTES: u64 = 1 << 20;

/// The filler before such an allocation. Measured on the development
/// machine (an AMD EPYC, two threads streaming `y = 2x + y` over 2^26
/// floats, `x` and `y` 2^28 + d bytes apart): 20–30 ms for d below 4 KiB,
/// 16 ms from 4 to 7 KiB, 9 ms from 8 KiB to 80 KiB (BENCHMARKS.md).
/// 80 KiB, more than a coherence chunk ([`crate::resident::CHUNK_BYTES`]):
/// such an array shares no chunk with the object before it, so launches
/// over two such arrays can share a GPU (the CUDA device's `share.rs`);
/// its distance from the one before is still 16 KiB past a multiple of
/// 64 KiB, as with the 16 KiB gap first measured. At most 8% of the
/// array.
pub const COLOUR_GAP_BYTES: u64 = 80 << 10;

/// Room for the padding that puts a placed array's elements on a cache
/// line ([`aligned_pad`]).
pub const ALIGN_SLACK_BYTES: u64 = 56;

/// The error for a header whose size does not fit one object (an array
/// of 4 GiB or more), with what was asked for and its size in bytes.
pub fn too_large(header: Header) -> HeapError {
    let (what, needed) = match header {
        Header::Array { elem, dims, len } => {
            let kind = crate::layout::array_elem_kind(elem, dims);
            let bytes = u64::from(crate::layout::HEADER_BYTES)
                + u64::from(len) * u64::from(crate::layout::kind_size(kind));
            (format!("an array of {len} {} elements", kind.name()), bytes)
        }
        Header::Object { size, .. } | Header::Filler { size } => {
            ("an object".to_string(), u64::from(size))
        }
    };
    HeapError::TooLarge {
        what,
        needed,
        max: u64::from(u32::MAX) - 7,
    }
}

/// Words of padding that move an array whose header would be at word
/// `at` so that its elements (the word after the header) start on a
/// 64-byte line: the heap's base is page aligned. Streaming kernels read
/// and write such arrays in 16-byte vectors; with the elements 8 bytes
/// past a line, one access in four straddles two lines (saxpy over 2^20
/// elements, two threads, hand-written 128-bit loop: 62 µs against 52).
pub fn aligned_pad(at: u32) -> u32 {
    (8 - (at + 1) % 8) % 8
}

/// How workitems allocate. One knob for experiments (docs/DESIGN.md, "Allocation").
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AllocPolicy {
    /// Shared TLABs with the designated-refiller protocol; each slot serves
    /// `group` consecutive workers (a GPU uses a block or warp).
    SharedTlab {
        /// Workers per slot (at least 1).
        group: usize,
    },
    /// Like `SharedTlab`, but an allocator that overflows without being the
    /// refiller fails at once with `Overflow` instead of waiting (on a device
    /// it deopts; the host retries).
    FailOnOverflow {
        /// Workers per slot.
        group: usize,
    },
    /// One TLAB per worker, never shared.
    PrivateTlab,
    /// No TLABs: every object is a CAS on eden's top.
    EdenCas,
}

impl Default for AllocPolicy {
    fn default() -> Self {
        AllocPolicy::SharedTlab { group: 1 }
    }
}

/// The policy as the command line and the REPL write it (`shared:2`,
/// `fail-on-overflow:1`, `private`, `eden-cas`); [`str::parse`] reads it
/// back.
impl std::fmt::Display for AllocPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AllocPolicy::SharedTlab { group } => write!(f, "shared:{group}"),
            AllocPolicy::FailOnOverflow { group } => write!(f, "fail-on-overflow:{group}"),
            AllocPolicy::PrivateTlab => write!(f, "private"),
            AllocPolicy::EdenCas => write!(f, "eden-cas"),
        }
    }
}

impl std::str::FromStr for AllocPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, arg) = s.split_once(':').unwrap_or((s, ""));
        let group = if arg.is_empty() {
            Ok(2)
        } else {
            arg.parse::<usize>()
                .map_err(|e| format!("bad group size `{arg}`: {e}"))
        };
        match name {
            "shared" => Ok(AllocPolicy::SharedTlab {
                group: group?.max(1),
            }),
            "fail-on-overflow" => Ok(AllocPolicy::FailOnOverflow {
                group: group?.max(1),
            }),
            "private" => Ok(AllocPolicy::PrivateTlab),
            "eden-cas" => Ok(AllocPolicy::EdenCas),
            other => Err(format!(
                "unknown allocation policy `{other}` (shared[:N], fail-on-overflow[:N], private, eden-cas)"
            )),
        }
    }
}

/// Counters of one launch's allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// TLAB refills (from eden).
    pub refills: u64,
    /// Allocation buffers taken from shared TLABs (see the module docs).
    pub buffer_refills: u64,
    /// Objects allocated straight from eden (large objects, `EdenCas`).
    pub direct: u64,
    /// Allocations that failed with eden exhausted.
    pub exhausted: u64,
    /// Times the heap grew during the launch.
    pub heap_grows: u64,
    /// Bytes handed back to eden at the end ([`Allocator::reclaim`]).
    pub reclaimed: u64,
    /// Bytes of workitems' dead objects their slots handed back to their
    /// own TLABs as each workitem ended (compiled code's nursery reset),
    /// reused by the next workitems of the launch.
    pub recycled: u64,
}

/// A class kind's refills (in a launch of several kinds,
/// [`Allocator::with_kinds`]) start at a page and double with each refill
/// of the kind up to the mixed kind's size, after this many: a slot has a
/// TLAB per kind, and the unused rest of each is lost until the next
/// collection, while a kind that many objects take grows to full TLABs at
/// once. (Fixed at an eighth, the shape example of BENCHMARKS.md, issue 48
/// per-kind TLABs, ran 1.08x slower than with full TLABs; full from the
/// start, it left 32% of a small launch's heap in TLAB rests.)
pub const CLASS_KIND_DOUBLINGS: u32 = 8;

/// The allocator of one launch. Dropping it (or [`Allocator::retire`]) turns
/// the unused rest of every TLAB into fillers so that the heap parses.
#[derive(Debug)]
pub struct Allocator<'h> {
    heap: &'h Heap,
    policy: AllocPolicy,
    slots: Box<[SharedTlab]>,
    /// One allocation buffer per worker (empty: workers bump their group's
    /// slot directly); see the module docs.
    buffers: Box<[SharedTlab]>,
    workers: usize,
    group: usize,
    large_words: u32,
    /// Words a refill carves (the heap's TLAB size unless overridden).
    tlab_words: u32,
    direct: AtomicU64,
    exhausted: AtomicU64,
    grows_at_start: u64,
    fault: Option<RefillFault>,
    /// Eden when this allocator was made: everything it allocates lies
    /// above `mark.top`.
    mark: HeapMark,
    /// Carves from eden it has asked for (TLAB refills and direct objects).
    carves: AtomicU64,
    /// Collector stress ([`Allocator::with_exhaustion_every`]): every
    /// `.0`-th TLAB refill from eden finds it exhausted; `.1` counts them.
    stress: Option<(u64, AtomicU64)>,
    /// The kinds of allocation, as page tags, each with a TLAB per slot
    /// and per buffer ([`Allocator::with_kinds`]): `slots` and `buffers`
    /// hold them kind by kind within each slot and buffer.
    kinds: Box<[u32]>,
    /// Refills from eden so far, per kind ([`CLASS_KIND_DOUBLINGS`]).
    kind_refills: Box<[AtomicU32]>,
}

impl<'h> Allocator<'h> {
    /// An allocator for `workers` concurrent workers.
    pub fn new(heap: &'h Heap, policy: AllocPolicy, workers: usize) -> Self {
        let workers = workers.max(1);
        let group = match policy {
            AllocPolicy::SharedTlab { group } | AllocPolicy::FailOnOverflow { group } => {
                group.max(1)
            }
            AllocPolicy::PrivateTlab => 1,
            AllocPolicy::EdenCas => workers,
        };
        let nslots = if policy == AllocPolicy::EdenCas {
            0
        } else {
            workers.div_ceil(group)
        };
        Allocator {
            heap,
            policy,
            slots: (0..nslots).map(|_| SharedTlab::new()).collect(),
            buffers: Box::default(),
            workers,
            group,
            large_words: (heap.config().tlab_bytes / 8 / 4).max(1),
            tlab_words: heap.config().tlab_bytes / 8,
            direct: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
            grows_at_start: heap.grow_count(),
            fault: None,
            mark: heap.mark(),
            carves: AtomicU64::new(0),
            stress: None,
            kinds: Box::new([offload_abi::pages::MIXED]),
            kind_refills: Box::new([AtomicU32::new(0)]),
        }
        .with_buffers(true)
    }

    /// Fault injection (tests): refill number `first` (1-based, counted over
    /// this allocator's slots) and every `every`-th after it (0: only the
    /// first) fail for the allocation that does them; see [`RefillFault`].
    pub fn with_refill_fault(mut self, first: u64, every: u64) -> Self {
        self.fault = Some(RefillFault::new(first, every));
        self
    }

    /// Collector stress (tests): every `every`-th TLAB refill from eden
    /// (counted over this allocator's slots) finds eden exhausted, as if
    /// the heap were full: the refiller publishes FAILED and the slot's
    /// allocators fail with [`AllocFailure::Exhausted`] — on a device they
    /// deopt with `AllocationFailure` — until a collection resets the
    /// slots ([`Allocator::reset_after_collection`]), which counts the
    /// refills anew. 0 turns it off.
    pub fn with_exhaustion_every(mut self, every: u64) -> Self {
        self.stress = (every > 0).then(|| (every, AtomicU64::new(0)));
        self
    }

    /// Give every slot and buffer a TLAB per kind of allocation, each
    /// carved from pages of its tag (`crate::pages`): `kinds` are the page
    /// tags of everything the launch allocates
    /// (`offload_program::Program::allocation_kinds`: classes, and arrays),
    /// so that compiled code finds its objects' class from their
    /// references; `[MIXED]` (the default) puts everything in one TLAB on
    /// mixed pages. An object whose tag is not among `kinds` never enters
    /// these TLABs unless there is a mixed kind ([`Allocator::kind_of`]):
    /// [`Allocator::alloc`] places it on pages of its own (compiled code
    /// allocates only what the kernel's instructions say).
    /// Call it before the first allocation; `kinds` must not be empty.
    ///
    /// [`MIXED`]: offload_abi::pages::MIXED
    pub fn with_kinds(mut self, kinds: &[u32]) -> Self {
        assert!(!kinds.is_empty(), "an allocator has at least one kind");
        let groups = self.slots.len();
        self.kinds = kinds.into();
        self.kind_refills = kinds.iter().map(|_| AtomicU32::new(0)).collect();
        self.slots = (0..groups * kinds.len())
            .map(|_| SharedTlab::new())
            .collect();
        let buffered = self.buffered();
        self.with_buffers(buffered)
    }

    /// The kinds of allocation ([`Allocator::with_kinds`]).
    pub fn kinds(&self) -> &[u32] {
        &self.kinds
    }

    /// The one page tag of everything this allocator's TLABs hold: the
    /// kind's, when there is one kind, else
    /// [`MIXED`](offload_abi::pages::MIXED).
    pub fn tag(&self) -> u32 {
        match *self.kinds {
            [one] => one,
            _ => offload_abi::pages::MIXED,
        }
    }

    /// The kind (index into [`Allocator::kinds`]) of an object with
    /// `header`: its tag's, else the mixed kind's; `None` when neither is
    /// among the kinds.
    pub fn kind_of(&self, header: Header) -> Option<usize> {
        kind_of(&self.kinds, crate::pages::tag_for(header))
    }

    /// Refill TLABs with `bytes` (rounded down to words, at least 8 words)
    /// instead of the heap's configured TLAB size — what a recompilation
    /// policy changes for one kernel's launches. Objects above a quarter of
    /// it are allocated straight from eden, as with the heap's size.
    pub fn with_tlab_bytes(mut self, bytes: u32) -> Self {
        self.tlab_words = (bytes / 8).max(8);
        self.large_words = (self.tlab_words / 4).max(1);
        self
    }

    /// Give each worker of a shared TLAB an allocation buffer of its own
    /// (`on`, the default), or let every worker of a group bump the shared
    /// TLAB once per object (the protocol as a GPU warp runs it; for
    /// experiments). No effect on policies whose TLABs are not shared.
    /// Call it before the first allocation.
    pub fn with_buffers(mut self, on: bool) -> Self {
        let want = on && self.group > 1 && !self.slots.is_empty();
        self.buffers = (0..if want {
            self.workers * self.kinds.len()
        } else {
            0
        })
            .map(|_| SharedTlab::new())
            .collect();
        self
    }

    /// Whether workers allocate from buffers of their own (see the module
    /// docs).
    pub fn buffered(&self) -> bool {
        !self.buffers.is_empty()
    }

    /// The words a TLAB refill carves.
    pub fn tlab_words(&self) -> u32 {
        self.tlab_words
    }

    /// The TLAB `worker` bumps for allocations of `kind` (an index into
    /// [`Allocator::kinds`]), if the policy has TLABs (compiled code runs
    /// its fast path inline): its allocation buffer when it has one, else
    /// its group's shared TLAB.
    pub fn tlab_for(&self, worker: usize, kind: usize) -> Option<&SharedTlab> {
        let k = self.kinds.len();
        if !self.buffers.is_empty() {
            let buffers = self.buffers.len() / k;
            Some(&self.buffers[(worker % buffers) * k + kind % k])
        } else {
            self.group_tlab(worker, kind)
        }
    }

    /// The shared TLAB of `worker`'s group for `kind`.
    fn group_tlab(&self, worker: usize, kind: usize) -> Option<&SharedTlab> {
        let k = self.kinds.len();
        let groups = self.slots.len() / k;
        if groups == 0 {
            None
        } else {
            Some(&self.slots[((worker / self.group) % groups) * k + kind % k])
        }
    }

    /// Objects of more words than this are allocated straight from eden,
    /// never from a TLAB.
    pub fn large_words(&self) -> u32 {
        self.large_words
    }

    /// Whether an allocator that overflows without being the refiller waits
    /// for the refill (every policy but `FailOnOverflow`).
    pub fn waits(&self) -> bool {
        !matches!(self.policy, AllocPolicy::FailOnOverflow { .. })
    }

    /// Finish an allocation whose TLAB fast path compiled code ran on
    /// `tlab_for(worker)`: it read generation `g`, its add returned `old`,
    /// and the object did not fit (see [`SharedTlab::finish`]). Writes the
    /// header on success.
    pub fn finish(
        &self,
        worker: usize,
        header: Header,
        g: u64,
        old: u64,
    ) -> Result<u32, AllocFailure> {
        let bytes = header.size().ok_or(AllocFailure::Exhausted)?;
        // Compiled code allocates only the kinds the kernel's instructions
        // make, each in its kind's TLAB.
        let kind = self.kind_of(header);
        debug_assert!(
            kind.is_some(),
            "compiled code allocated {header}, of no kind"
        );
        let kind = kind.ok_or(AllocFailure::Exhausted)?;
        let slot = self.tlab_for(worker, kind).ok_or(AllocFailure::Exhausted)?;
        let w = words(bytes) as u32;
        let at = self.refill_from(worker, kind, |eden, wait, fault| {
            slot.finish(g, old, w, eden, wait, fault)
        });
        self.placed(at, header)
    }

    /// Eden as this allocator's TLAB refills of `kind` see it.
    fn eden(&self, kind: usize) -> SizedEden<'_> {
        SizedEden {
            heap: self.heap,
            words: self.kind_words(kind, self.tlab_words),
            carves: &self.carves,
            stress: self.stress.as_ref(),
            tag: self.kinds[kind],
            refills: &self.kind_refills[kind],
        }
    }

    /// What a refill of `kind` carves where the mixed kind's carves
    /// `words`: a class kind's start at a page and double with each of
    /// the kind's refills from eden ([`CLASS_KIND_DOUBLINGS`]).
    fn kind_words(&self, kind: usize, words: u32) -> u32 {
        if offload_abi::pages::names_class(self.kinds[kind]) && self.kinds.len() > 1 {
            let n = self.kind_refills[kind]
                .load(Ordering::Relaxed)
                .min(CLASS_KIND_DOUBLINGS);
            (offload_abi::pages::PAGE_WORDS << n).min(words)
        } else {
            words
        }
    }

    /// Before a collection (at a safepoint, no allocation in flight): the
    /// unused rest of every TLAB and buffer becomes a filler, so that the
    /// heap parses; the slots hold no room until
    /// [`Allocator::reset_after_collection`].
    pub fn retire_for_collection(&self) {
        for s in self.buffers.iter().chain(self.slots.iter()) {
            s.retire(self.heap);
        }
    }

    /// After a collection moved eden's top: every slot and buffer is empty
    /// and may allocate again (one that had seen eden exhausted too), its
    /// next allocation refilling from eden as it is now. Objects this
    /// allocator made before may have moved below its mark, so it no longer
    /// hands its memory back at the end ([`Allocator::reclaim`] frees
    /// nothing: the collection counted as a foreign carve).
    pub fn reset_after_collection(&self) {
        for s in self.buffers.iter().chain(self.slots.iter()) {
            s.reset();
        }
        // Stress's exhaustion is made up: counted anew from a collection,
        // the first refill after one finds room, as a real collection of
        // a heap that is not full gives it. (Counted on, the one allocation
        // a worker alone among waiters tries after its collection could
        // find the made-up exhaustion and throw `OutOfMemory`.)
        if let Some((_, count)) = &self.stress {
            count.store(0, Ordering::Relaxed);
        }
    }

    /// Run `f` on what the TLAB `worker` bumps is refilled from, with
    /// whether it waits for another allocator's refill and the refill fault
    /// to inject: for an allocation buffer, its group's shared TLAB, and
    /// the buffer's own protocol never waits (no one else uses it) and
    /// injects nothing, while the group's does both as the policy says;
    /// otherwise eden, as the policy says.
    fn refill_from<R>(
        &self,
        worker: usize,
        kind: usize,
        f: impl FnOnce(&dyn Eden, bool, Option<&RefillFault>) -> R,
    ) -> R {
        match self
            .group_tlab(worker, kind)
            .filter(|_| !self.buffers.is_empty())
        {
            Some(group) => f(
                &BufferEden {
                    group,
                    eden: self.eden(kind),
                    words: self.kind_words(kind, self.large_words),
                    wait: self.waits(),
                    fault: self.fault.as_ref(),
                },
                true,
                None,
            ),
            None => f(&self.eden(kind), self.waits(), self.fault.as_ref()),
        }
    }

    /// Count an exhausted allocation, or write the header of a placed one.
    fn placed(&self, at: Result<u32, AllocFailure>, header: Header) -> Result<u32, AllocFailure> {
        let at = at.inspect_err(|e| {
            if *e == AllocFailure::Exhausted {
                self.exhausted.fetch_add(1, Ordering::Relaxed);
            }
        })?;
        self.heap
            .write_header(at, header)
            .map_err(|_| AllocFailure::Exhausted)?;
        Ok(at)
    }

    /// Objects allocated straight from eden so far (large objects, and
    /// every object without TLABs).
    pub fn direct_allocations(&self) -> u64 {
        self.direct.load(Ordering::Relaxed)
    }

    /// The heap.
    pub fn heap(&self) -> &'h Heap {
        self.heap
    }

    /// Allocate an object of `bytes` for `worker` and write its header.
    /// `Overflow` is transient (retry); `Exhausted` means the heap is at its
    /// maximum.
    pub fn alloc(&self, worker: usize, header: Header) -> Result<u32, AllocFailure> {
        let bytes = header.size().ok_or(AllocFailure::Exhausted)?;
        let w = words(bytes);
        let kind = self.kind_of(header);
        let at = match kind.and_then(|k| self.tlab_for(worker, k).map(|t| (k, t))) {
            Some((kind, slot)) if w <= u64::from(self.large_words) => {
                self.refill_from(worker, kind, |eden, wait, fault| {
                    slot.allocate_with(w as u32, eden, wait, fault)
                })
            }
            _ => {
                self.direct.fetch_add(1, Ordering::Relaxed);
                self.carves.fetch_add(1, Ordering::Relaxed);
                // On pages of its kind (mixed ones included), else on
                // pages of its own tag.
                let on = kind.map_or_else(
                    || crate::pages::tag_for(header).unwrap_or(offload_abi::pages::MIXED),
                    |k| self.kinds[k],
                );
                self.heap
                    .alloc_direct_on(bytes, on)
                    .map_err(|_| AllocFailure::Exhausted)
            }
        };
        self.placed(at, header)
    }

    /// Allocate from the host (no worker): straight from eden. An object of
    /// at least [`COLOUR_MIN_BYTES`] starts [`COLOUR_GAP_BYTES`] further on,
    /// behind a filler, when the heap has room for both.
    ///
    /// Why: arrays the host allocates one after another lie back to back,
    /// so two of a power-of-two size are a power of two apart (plus a
    /// header), and a kernel that streams through both (`y[i] = a * x[i] +
    /// y[i]`) runs its two streams through the memory system in step:
    /// saxpy over 2^26 elements ran 3.3x slower than with the arrays 16 KiB
    /// further apart (BENCHMARKS.md, 2026-11-26). Such an object also
    /// starts where its elements (the word after the header) lie on a
    /// 64-byte line ([`aligned_pad`]): up to [`ALIGN_SLACK_BYTES`] of
    /// padding before the gap, and the rest after the object, both
    /// fillers. The collector keeps the gap of a live array so placed
    /// (`gc::mark`) and pads it again where it slides (`Heap::collect`),
    /// so gap and alignment survive compaction.
    ///
    /// Objects go to pages of their class and arrays to pages of arrays
    /// (`crate::pages`), so that compiled code finds an object's class
    /// from its reference.
    pub fn alloc_host(heap: &Heap, header: Header) -> Result<u32, HeapError> {
        let bytes = header.size().ok_or_else(|| too_large(header))?;
        let tag = crate::pages::tag_for(header).unwrap_or(offload_abi::pages::MIXED);
        if words(bytes) <= u64::from(offload_abi::pages::PAGE_WORDS) {
            let at = heap.alloc_in_run(tag, words(bytes))?;
            heap.write_header(at, header)?;
            return Ok(at);
        }
        if bytes >= COLOUR_MIN_BYTES
            && let Ok(start) =
                heap.alloc_direct_on(bytes + COLOUR_GAP_BYTES + ALIGN_SLACK_BYTES, tag)
        {
            let gap_words = words(COLOUR_GAP_BYTES) as u32;
            let slack = (ALIGN_SLACK_BYTES / 8) as u32;
            // Padding before the gap so that the elements (one word past
            // the header) start on a cache line; the rest of the slack
            // after the array.
            let pad = aligned_pad(start + gap_words);
            let gap = start + pad;
            let at = gap + gap_words;
            let fill = |at: u32, words: u32| {
                if words == 0 {
                    return Ok(());
                }
                heap.write_header(at, Header::Filler { size: words * 8 })
            };
            fill(start, pad)?;
            fill(gap, gap_words)?;
            heap.write_header(at, header)?;
            fill(at + words(bytes) as u32, slack - pad)?;
            return Ok(at);
        }
        // An array of more than a page starts where its elements lie on a
        // cache line, as a `cudaMalloc`ed one does: a kernel streaming
        // through two arrays whose elements sit 8 bytes apart modulo a
        // 32-byte sector cannot have both coalesced (matmul's `b` and `c`
        // cost 1.2x CUDA C's sectors when layout left them so).
        if matches!(header, Header::Array { .. })
            && let Ok(start) = heap.alloc_direct_on(bytes + ALIGN_SLACK_BYTES, tag)
        {
            let slack = (ALIGN_SLACK_BYTES / 8) as u32;
            let pad = aligned_pad(start);
            let fill = |at: u32, words: u32| {
                if words == 0 {
                    return Ok(());
                }
                heap.write_header(at, Header::Filler { size: words * 8 })
            };
            fill(start, pad)?;
            let at = start + pad;
            heap.write_header(at, header)?;
            fill(at + words(bytes) as u32, slack - pad)?;
            return Ok(at);
        }
        let at = heap.alloc_direct_on(bytes, tag)?;
        heap.write_header(at, header)?;
        Ok(at)
    }

    /// Counters so far.
    pub fn stats(&self) -> AllocStats {
        AllocStats {
            refills: self.slots.iter().map(SharedTlab::refills).sum(),
            buffer_refills: self.buffers.iter().map(SharedTlab::refills).sum(),
            direct: self.direct.load(Ordering::Relaxed),
            exhausted: self.exhausted.load(Ordering::Relaxed),
            heap_grows: self.heap.grow_count() - self.grows_at_start,
            reclaimed: 0,
            recycled: 0,
        }
    }

    /// The first heap word an object of this allocator can have: a
    /// reference at or above it is to an object allocated during the
    /// launch (a write barrier's "young").
    pub fn young_start(&self) -> u32 {
        self.mark.top
    }

    /// The policy.
    pub fn policy(&self) -> AllocPolicy {
        self.policy
    }

    /// Number of TLAB slots (slot groups), each with a TLAB per kind.
    pub fn slot_count(&self) -> usize {
        self.slots.len() / self.kinds.len()
    }

    /// Retire every TLAB (fill their unused tails) and return the counters.
    pub fn retire(self) -> AllocStats {
        let st = self.stats();
        drop(self);
        st
    }

    /// Retire, and hand everything this allocator allocated back to eden
    /// ([`Heap::reclaim`]) when no one else carved from eden meanwhile.
    /// The caller vouches that none of those objects is reachable: the
    /// launch is over and its write barrier saw no reference to one stored
    /// into an older object.
    pub fn reclaim(self) -> AllocStats {
        let (heap, mark) = (self.heap, self.mark);
        let own = self.carves.load(Ordering::Relaxed);
        let mut st = self.retire();
        st.reclaimed = heap.reclaim(mark, own);
        st
    }
}

impl Drop for Allocator<'_> {
    fn drop(&mut self) {
        // A buffer's tail lies inside its group's TLAB, below that TLAB's
        // `top`: both kinds of tail become fillers, in either order.
        for s in self.buffers.iter().chain(self.slots.iter()) {
            s.retire(self.heap);
        }
    }
}

/// The kind (an index into `kinds`, page tags) of an allocation of page
/// tag `tag`: its own, else the mixed kind, if either is there. Compiled
/// code picks an allocation site's TLAB by the same rule.
pub fn kind_of(kinds: &[u32], tag: Option<u32>) -> Option<usize> {
    tag.and_then(|t| kinds.iter().position(|&k| k == t))
        .or_else(|| kinds.iter().position(|&k| k == offload_abi::pages::MIXED))
}

/// A group's shared TLAB as its workers' allocation buffers see it: a
/// refill takes `words` words (or the object's, if more) from it as one
/// allocation through the designated-refiller protocol.
struct BufferEden<'h> {
    group: &'h SharedTlab,
    eden: SizedEden<'h>,
    words: u32,
    wait: bool,
    fault: Option<&'h RefillFault>,
}

impl Eden for BufferEden<'_> {
    fn carve(&self, min_words: u32) -> Result<(u32, u32), AllocFailure> {
        let n = self.words.max(min_words);
        let at = self
            .group
            .allocate_with(n, &self.eden, self.wait, self.fault)?;
        Ok((at, at + n))
    }

    fn fill(&self, start: u32, end: u32) {
        Eden::fill(self.eden.heap, start, end);
    }
}

/// The heap's eden as an allocator's TLABs see it: refills carve the
/// allocator's TLAB size.
struct SizedEden<'h> {
    heap: &'h Heap,
    words: u32,
    /// The allocator's count of its carves.
    carves: &'h AtomicU64,
    /// Collector stress: (every, count); see
    /// [`Allocator::with_exhaustion_every`].
    stress: Option<&'h (u64, AtomicU64)>,
    /// The tag of the pages refills carve.
    tag: u32,
    /// The kind's count of its refills from eden.
    refills: &'h AtomicU32,
}

impl Eden for SizedEden<'_> {
    fn carve(&self, min_words: u32) -> Result<(u32, u32), AllocFailure> {
        if let Some((every, count)) = self.stress
            && (count.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(*every)
        {
            return Err(AllocFailure::Exhausted);
        }
        self.carves.fetch_add(1, Ordering::Relaxed);
        self.refills.fetch_add(1, Ordering::Relaxed);
        self.heap
            .carve_region(min_words, self.words.max(min_words), self.tag)
            .ok_or(AllocFailure::Exhausted)
    }

    fn fill(&self, start: u32, end: u32) {
        Eden::fill(self.heap, start, end);
    }
}

#[cfg(test)]
mod tests;
