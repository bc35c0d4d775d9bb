//! Allocation for one launch: the policy knob and its slots.

use crate::heap::{Heap, HeapError, HeapMark};
use crate::layout::{Header, words};
use crate::tlab::{AllocFailure, Eden, RefillFault, SharedTlab};
use std::sync::atomic::{AtomicU64, Ordering};

/// How workitems allocate. One knob for experiments (DESIGN.md, "Allocation").
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
    /// TLAB refills.
    pub refills: u64,
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

/// The allocator of one launch. Dropping it (or [`Allocator::retire`]) turns
/// the unused rest of every TLAB into fillers so that the heap parses.
#[derive(Debug)]
pub struct Allocator<'h> {
    heap: &'h Heap,
    policy: AllocPolicy,
    slots: Box<[SharedTlab]>,
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
            group,
            large_words: (heap.config().tlab_bytes / 8 / 4).max(1),
            tlab_words: heap.config().tlab_bytes / 8,
            direct: AtomicU64::new(0),
            exhausted: AtomicU64::new(0),
            grows_at_start: heap.grow_count(),
            fault: None,
            mark: heap.mark(),
            carves: AtomicU64::new(0),
        }
    }

    /// Fault injection (tests): refill number `first` (1-based, counted over
    /// this allocator's slots) and every `every`-th after it (0: only the
    /// first) fail for the allocation that does them; see [`RefillFault`].
    pub fn with_refill_fault(mut self, first: u64, every: u64) -> Self {
        self.fault = Some(RefillFault::new(first, every));
        self
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

    /// The words a TLAB refill carves.
    pub fn tlab_words(&self) -> u32 {
        self.tlab_words
    }

    /// The shared TLAB `worker` allocates from, if the policy has TLABs
    /// (compiled code runs its fast path inline).
    pub fn tlab_for(&self, worker: usize) -> Option<&SharedTlab> {
        if self.slots.is_empty() {
            None
        } else {
            Some(&self.slots[(worker / self.group) % self.slots.len()])
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
        let slot = self.tlab_for(worker).ok_or(AllocFailure::Exhausted)?;
        let at = slot.finish(
            g,
            old,
            words(bytes) as u32,
            &self.eden(),
            self.waits(),
            self.fault.as_ref(),
        );
        self.placed(at, header)
    }

    /// Eden as this allocator's TLAB refills see it.
    fn eden(&self) -> SizedEden<'_> {
        SizedEden {
            heap: self.heap,
            words: self.tlab_words,
            carves: &self.carves,
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
        let at = match self.tlab_for(worker) {
            Some(slot) if w <= u64::from(self.large_words) => {
                slot.allocate_with(w as u32, &self.eden(), self.waits(), self.fault.as_ref())
            }
            _ => {
                self.direct.fetch_add(1, Ordering::Relaxed);
                self.carves.fetch_add(1, Ordering::Relaxed);
                self.heap
                    .alloc_direct(bytes)
                    .map_err(|_| AllocFailure::Exhausted)
            }
        };
        self.placed(at, header)
    }

    /// Allocate from the host (no worker): straight from eden.
    pub fn alloc_host(heap: &Heap, header: Header) -> Result<u32, HeapError> {
        let bytes = header.size().ok_or(HeapError::Exhausted {
            needed: u64::MAX,
            max: heap.config().max,
        })?;
        let at = heap.alloc_direct(bytes)?;
        heap.write_header(at, header)?;
        Ok(at)
    }

    /// Counters so far.
    pub fn stats(&self) -> AllocStats {
        AllocStats {
            refills: self.slots.iter().map(SharedTlab::refills).sum(),
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

    /// Number of TLAB slots.
    pub fn slot_count(&self) -> usize {
        self.slots.len()
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
        for s in self.slots.iter() {
            s.retire(self.heap);
        }
    }
}

/// The heap's eden as an allocator's TLABs see it: refills carve the
/// allocator's TLAB size.
struct SizedEden<'h> {
    heap: &'h Heap,
    words: u32,
    /// The allocator's count of its carves.
    carves: &'h AtomicU64,
}

impl Eden for SizedEden<'_> {
    fn carve(&self, min_words: u32) -> Option<(u32, u32)> {
        self.carves.fetch_add(1, Ordering::Relaxed);
        self.heap.carve_region(min_words, self.words.max(min_words))
    }

    fn fill(&self, start: u32, end: u32) {
        Eden::fill(self.heap, start, end);
    }
}
