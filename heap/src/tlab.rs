//! The shared-TLAB protocol with a designated refiller (Sumatra, "Allocation").
//!
//! A [`SharedTlab`] is used by a group of concurrent allocators. Its state is
//! one 64-bit word, `end << 32 | top`, in heap words, so one atomic add on it
//! returns a consistent snapshot of both:
//!
//! 1. Read the generation `g` (acquire). If it is FAILED, fail.
//! 2. `old = fetch_add(state, size)`. If `old.top + size <= old.end`, the
//!    object is at `old.top`: done. This is the whole fast path.
//! 3. If `old.top <= old.end < old.top + size`, this allocator's add is the
//!    unique one that crossed `end`: it is the **designated refiller**. It
//!    turns the gap `[old.top, old.end)` into a filler object, carves a new
//!    TLAB from eden, stores the new state (its own object first) and bumps
//!    the generation with release ordering. If eden is exhausted it sets the
//!    FAILED bit instead, and every allocator of the slot fails from then on.
//! 4. Otherwise (`old.top > old.end`) another allocator is refilling: wait
//!    until the generation differs from `g`, then retry from step 1.
//!
//! Reading `g` *before* the add is what makes the wait safe: if the refill
//! finished between the two, the generation already differs and the waiter
//! retries at once instead of waiting for a refill that already happened.
//!
//! Overflowing adds push `top` past `end` by at most one object per
//! concurrent allocator; objects larger than a quarter TLAB never come here
//! (they are allocated straight from eden), and the heap is limited to 2^31
//! words, so `top` never carries into `end`.

use crate::sync::{AtomicU64, Ordering, backoff, load_for_wait};

/// Set in the generation when eden was exhausted during a refill (its bit
/// layout, like the state word's, is the ABI's: compiled code tests it).
pub use offload_abi::tlab::FAILED;
use offload_abi::tlab::{pack, unpack};

/// Where TLABs come from: the heap's eden, or (for a worker's allocation
/// buffer, see `crate::alloc`) its group's shared TLAB.
pub trait Eden {
    /// Carve a fresh TLAB of at least `min_words` words: `[start, end)` in
    /// words; [`AllocFailure::Exhausted`] when eden is exhausted (for good),
    /// [`AllocFailure::Overflow`] when this carve failed but a later one
    /// may succeed.
    fn carve(&self, min_words: u32) -> Result<(u32, u32), AllocFailure>;
    /// Make `[start, end)` (words, `start < end`) parse as one filler object.
    fn fill(&self, start: u32, end: u32);
}

/// Why an allocation did not succeed.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum AllocFailure {
    /// Eden is exhausted (the runtime grows the heap or reports
    /// `OutOfMemory`). Every allocator of the slot sees this until the slot is
    /// replaced.
    Exhausted,
    /// The TLAB overflowed and the policy says not to wait for the refill
    /// (retry, or on a device, deopt).
    Overflow,
}

/// One shared TLAB slot. `#[repr(C)]`: compiled code runs the fast path
/// (steps 1–2) on its words, at the offsets of
/// [`offload_abi::tlab::TlabWords`], itself and hands anything else to
/// [`SharedTlab::finish`].
///
/// Aligned to 128 bytes (two cache lines, as the adjacent-line prefetcher
/// fetches them) so that the slots of different groups, which sit side by
/// side in the allocator, never share a line: with 24-byte slots, two
/// workers' atomic adds bounced one line between their cores and the
/// allocation kernel ran 2.6x slower.
#[derive(Debug)]
#[repr(C, align(128))]
pub struct SharedTlab {
    state: AtomicU64,
    generation: AtomicU64,
    refills: AtomicU64,
}

// Compiled code runs the fast path on these words at the ABI's offsets
// (`offload_abi::tlab::TlabWords`): the fields must sit there. (Loom's
// atomics are larger; its models run no compiled code.)
#[cfg(not(loom))]
const _: () = {
    use offload_abi::tlab as abi;
    assert!(std::mem::offset_of!(SharedTlab, state) == abi::STATE_OFFSET as usize);
    assert!(std::mem::offset_of!(SharedTlab, generation) == abi::GENERATION_OFFSET as usize);
    assert!(std::mem::offset_of!(SharedTlab, refills) == abi::REFILLS_OFFSET as usize);
};

impl Default for SharedTlab {
    fn default() -> Self {
        Self::new()
    }
}

/// What an allocator does after its add.
enum After {
    Got(u32),
    Fail(AllocFailure),
    Wait,
}

/// Fault injection: make chosen refills fail for the allocator that does
/// them (tests only). The refill itself still happens — other allocators of
/// the slot must not wait forever — but the refiller's own object becomes a
/// filler and it gets [`AllocFailure::Overflow`] (transient: a device
/// deopts, the host retries).
#[derive(Debug)]
pub struct RefillFault {
    /// Fail refill number `first` (1-based across the allocator's slots) ...
    pub first: u64,
    /// ... and every `every`-th after it (0: only `first`).
    pub every: u64,
    /// Refills so far.
    pub count: AtomicU64,
}

impl RefillFault {
    /// Fail refill `first` (1-based; 0: none) and every `every`-th after it.
    pub fn new(first: u64, every: u64) -> RefillFault {
        RefillFault {
            first,
            every,
            count: AtomicU64::new(0),
        }
    }

    /// Count a refill; whether it is one to fail.
    fn hit(&self) -> bool {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        self.first > 0
            && n >= self.first
            && (n == self.first || (self.every > 0 && (n - self.first).is_multiple_of(self.every)))
    }
}

impl SharedTlab {
    /// An empty slot: the first allocation becomes its refiller.
    pub fn new() -> Self {
        SharedTlab {
            state: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            refills: AtomicU64::new(0),
        }
    }

    /// Allocate `words` words. With `wait` false, an allocator that overflows
    /// without being the refiller returns [`AllocFailure::Overflow`] at once.
    pub fn allocate(
        &self,
        words: u32,
        eden: &(impl Eden + ?Sized),
        wait: bool,
    ) -> Result<u32, AllocFailure> {
        self.allocate_with(words, eden, wait, None)
    }

    /// [`SharedTlab::allocate`] with optional refill fault injection.
    pub fn allocate_with(
        &self,
        words: u32,
        eden: &(impl Eden + ?Sized),
        wait: bool,
        fault: Option<&RefillFault>,
    ) -> Result<u32, AllocFailure> {
        debug_assert!(words > 0);
        loop {
            let g = self.generation.load(Ordering::Acquire);
            if g & FAILED != 0 {
                return Err(AllocFailure::Exhausted);
            }
            let old = self.state.fetch_add(u64::from(words), Ordering::AcqRel);
            match self.after_add(old, words, eden, fault) {
                After::Got(at) => return Ok(at),
                After::Fail(e) => return Err(e),
                After::Wait if !wait => return Err(AllocFailure::Overflow),
                After::Wait => self.wait_past(g),
            }
        }
    }

    /// The rest of an allocation whose steps 1–2 compiled code ran: it read
    /// generation `g` (not FAILED), its add of `words` returned `old`, and
    /// the object did not fit. Completes the protocol (refill, or wait and
    /// retry) exactly as [`SharedTlab::allocate_with`] would.
    pub fn finish(
        &self,
        g: u64,
        old: u64,
        words: u32,
        eden: &(impl Eden + ?Sized),
        wait: bool,
        fault: Option<&RefillFault>,
    ) -> Result<u32, AllocFailure> {
        match self.after_add(old, words, eden, fault) {
            After::Got(at) => Ok(at),
            After::Fail(e) => Err(e),
            After::Wait if !wait => Err(AllocFailure::Overflow),
            After::Wait => {
                self.wait_past(g);
                self.allocate_with(words, eden, wait, fault)
            }
        }
    }

    fn after_add(
        &self,
        old: u64,
        words: u32,
        eden: &(impl Eden + ?Sized),
        fault: Option<&RefillFault>,
    ) -> After {
        let (top, end) = unpack(old);
        let new_top = u64::from(top) + u64::from(words);
        if new_top <= u64::from(end) {
            return After::Got(top);
        }
        if top > end {
            return After::Wait;
        }
        // The designated refiller.
        if top < end {
            eden.fill(top, end);
        }
        match eden.carve(words) {
            Ok((start, new_end)) => {
                debug_assert!(u64::from(start) + u64::from(words) <= u64::from(new_end));
                // A swap, not a store: the add that reads the new state is
                // ordered after it in every model.
                self.state
                    .swap(pack(start + words, new_end), Ordering::AcqRel);
                self.refills.fetch_add(1, Ordering::Relaxed);
                self.generation.fetch_add(1, Ordering::Release);
                if fault.is_some_and(RefillFault::hit) {
                    eden.fill(start, start + words);
                    return After::Fail(AllocFailure::Overflow);
                }
                After::Got(start)
            }
            Err(AllocFailure::Exhausted) => {
                self.generation.fetch_or(FAILED, Ordering::Release);
                After::Fail(AllocFailure::Exhausted)
            }
            Err(AllocFailure::Overflow) => {
                // A transient failure: publish an empty TLAB, so that the
                // next add (of anyone) crosses `end` again and makes its
                // allocator the refiller; waiters retry at the new
                // generation.
                self.state.swap(pack(end, end), Ordering::AcqRel);
                self.generation.fetch_add(1, Ordering::Release);
                After::Fail(AllocFailure::Overflow)
            }
        }
    }

    fn wait_past(&self, g: u64) {
        let mut round = 0;
        while load_for_wait(&self.generation) == g {
            backoff(round);
            round += 1;
        }
    }

    /// How many times this slot was refilled.
    pub fn refills(&self) -> u64 {
        self.refills.load(Ordering::Relaxed)
    }

    /// Whether the slot saw eden exhausted.
    pub fn failed(&self) -> bool {
        self.generation.load(Ordering::Acquire) & FAILED != 0
    }

    /// The current `(top, end)` in words.
    pub fn bounds(&self) -> (u32, u32) {
        unpack(self.state.load(Ordering::Acquire))
    }

    /// Move `top` back from `top` to `to` if the state is still `(top,
    /// end)`: the objects in `[to, top)` are dead and the caller has zeroed
    /// them (carved memory reads as zero). Only for a TLAB no other
    /// allocator uses. Returns whether it moved.
    pub fn rewind(&self, (top, end): (u32, u32), to: u32) -> bool {
        to <= top
            && self
                .state
                .compare_exchange(
                    pack(top, end),
                    pack(to, end),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
    }

    /// Make the slot empty again after a collection moved eden's top (its
    /// TLAB, retired before the collection, is gone): the next allocation
    /// becomes its refiller and carves from eden anew, and a slot that had
    /// seen eden exhausted ([`FAILED`]) may allocate again. Only when no
    /// allocation is in flight (at a safepoint).
    pub fn reset(&self) {
        self.state.store(0, Ordering::Release);
        let g = self.generation.load(Ordering::Acquire);
        self.generation
            .store((g & !FAILED).wrapping_add(1) & !FAILED, Ordering::Release);
    }

    /// Retire the slot once no allocation is in flight: the unused rest of its
    /// TLAB becomes a filler, so the heap parses.
    pub fn retire(&self, eden: &(impl Eden + ?Sized)) {
        let (top, end) = unpack(self.state.load(Ordering::Acquire));
        if top < end {
            eden.fill(top, end);
        }
        self.state.store(pack(end, end), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::SharedTlab;

    #[test]
    fn slots_side_by_side_never_share_a_cache_line() {
        assert_eq!(std::mem::align_of::<SharedTlab>(), 128);
        let two = [SharedTlab::new(), SharedTlab::new()];
        let (a, b) = (&raw const two[0] as usize, &raw const two[1] as usize);
        assert!(b - a >= 128 && a % 128 == 0);
    }
}
