//! The CPU device's side of the contract: the launch context every slot
//! loop receives ([`LaunchCtx`]), the words each slot leaves for the host
//! ([`SlotWords`]), the parts of the range slots claim from ([`Part`]), and
//! the byte offsets of their fields for the code generator ([`offsets`],
//! derived from the types).

use crate::tlab::TlabWords;
use std::sync::atomic::{AtomicI64, AtomicU32};

/// What a compiled slot loop needs. The runtime owns every pointed-to object
/// and keeps it alive (and the heap committed) for the whole launch.
#[repr(C)]
#[derive(Debug)]
pub struct LaunchCtx {
    /// The heap's first byte; references are word offsets from here.
    pub heap_base: *mut u8,
    /// The range cut into `part_count` parts ([`Part`]), slot `s`'s home
    /// part first in its claims.
    pub parts: *const Part,
    /// Parts at `parts`, at least 1.
    pub part_count: i64,
    /// Workitems per claim.
    pub chunk: i64,
    /// The control word.
    pub control: *const AtomicU32,
    /// The save area: `records_per_slot` records of `record_words` words per
    /// slot (slot `s` owns records `s * records_per_slot ..`).
    pub save_area: *mut u64,
    /// Words per save record.
    pub record_words: u64,
    /// Per slot, what it tells the host when it returns ([`SlotWords`]).
    pub slots: *mut SlotWords,
    /// The kernel's captures, one raw slot each.
    pub captures: *const u64,
    /// Save records per slot, at least 1. A slot that deoptimizes writes its
    /// next record and goes on with its next workitem; it stops when its
    /// records are full (or at a safepoint). The area stays O(slots).
    pub records_per_slot: u64,
    /// Per slot, the shared TLABs its fast path allocates from, one per
    /// kind of what the kernel allocates (`Program::allocation_kinds`):
    /// slot `s`'s TLAB of kind `k` is at index `s * kinds + k` (null: the
    /// policy has none, every allocation takes the slow path). Each is an
    /// `offload_heap::SharedTlab`, whose words are laid out as
    /// [`TlabWords`].
    pub tlabs: *const *const TlabWords,
    /// The launch's `offload_heap::Allocator`, for the slow path.
    pub allocator: *const std::ffi::c_void,
    /// Objects of more words than this skip the fast path.
    pub large_words: u64,
    /// The largest object (words) a slot bumps in a TLAB of its own with a
    /// plain load and store instead of the shared protocol's atomic add:
    /// `large_words` when every slot's TLAB is its own (a TLAB group of
    /// one), else 0 (no object is that small). Compiled code compares
    /// against it in memory, rather than keep it in a register through
    /// every loop that allocates.
    pub own_limit: u64,
    /// The first heap word this launch allocates at: a reference at or
    /// above it is to an object made during the launch. Storing one into
    /// an object below it (the write barrier of `putfield` and
    /// `ref.astore`) sets the slot's `escaped`, and the launch's objects
    /// are then not handed back to eden at its end.
    pub young: u64,
    /// Non-zero when compiled code may hand each workitem's objects back
    /// at its end (the nursery reset; `cpu` module docs): every slot has
    /// a TLAB of its own and the runtime reclaims dead objects.
    pub nursery: u64,
    /// The heap's page table: one tag per page ([`crate::pages`]), from
    /// which compiled code reads an object's class without its header.
    pub pages: *const u32,
    /// Non-zero once better code for this kernel version is ready than the
    /// code running: the quick tier (`offload_jit::CompileOptions::quick`)
    /// reads it before each claim and stops there (`exit::STOPPED`, with
    /// nothing unstarted), so that its worker enters the optimized code for
    /// the rest of the launch. Never null; the optimized tier does not read
    /// it.
    pub better: *const AtomicU32,
    /// For a reducing kernel, per slot [`VALUES_PER_SLOT`] values of
    /// consecutive workitems, the first [`SlotWords::values_first`], each
    /// in its type's size (4 bytes for `i32` and `f32`, else 8): slot `s`'s
    /// start at word `s * VALUES_PER_SLOT`, and
    /// [`SlotWords::values`] of them are filled. A workitem's `ret`
    /// appends its value; with the buffer full, or a claim that does not
    /// continue the run, the slot leaves ([`crate::exit::VALUES`]) and the
    /// host joins the values into the combine tree ([`crate::reduce`]) and
    /// enters it again. Null for a kernel that returns nothing.
    pub values: *mut u64,
    /// For a kernel with parameters a launch may sum into
    /// (`offload_ir::summed`): `copy_rows` rows of one raw slot per such
    /// parameter, in parameter order; slot `s` takes those parameters from
    /// row `s % copy_rows` instead of [`LaunchCtx::captures`] (a summed
    /// array's row holds a copy of it, another parameter's its capture).
    /// Null for a kernel without such parameters.
    pub copies: *const u64,
    /// Rows at [`LaunchCtx::copies`], at least 1 when it is not null.
    pub copy_rows: u64,
}

/// Values in a slot's part of [`LaunchCtx::values`].
pub const VALUES_PER_SLOT: i64 = 4096;

/// The words one slot writes and the host reads between the slot's
/// entries, on cache lines of their own: each deopt exit writes them, and
/// with the slots' words side by side every exit of one slot would take
/// the line from the core running another (false sharing cost the 1%-deopt
/// benchmark more than the deopts themselves). 128 bytes, because x86
/// cores fetch lines in adjacent pairs.
#[repr(C, align(128))]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotWords {
    /// The unstarted `[start, end)` of its chunk when it returned.
    pub never_ran: [i64; 2],
    /// Workitems it completed during its last entry.
    pub completed: u64,
    /// The save records it has written since the host last replayed them
    /// (the host sets it to 0 when it has).
    pub records: u64,
    /// Non-zero once it stored a reference to an object of this launch
    /// into an older object ([`LaunchCtx::young`]), or one of the running
    /// workitem's objects into an object of another.
    pub escaped: u64,
    /// Heap words of dead workitem objects it handed back to its TLAB at
    /// workitem ends ([`LaunchCtx::nursery`]).
    pub recycled: u64,
    /// The state of injected safepoints (`offload_jit::SafepointInjection`)
    /// when the slot last polled: kept here so that the stream goes on
    /// across the slot's entries (0 before its first poll).
    pub inject_state: u64,
    /// The answer of the allocation slow path's last call
    /// (`offload_jit::cpu::rt::offload_alloc_slow`): compiled code calls it through a
    /// convention that preserves every register and passes no result back.
    pub slow_result: u64,
    /// Non-zero: the host enters the slot to resume the save record just
    /// past its count (record `records` of its part of the save area, whose
    /// site is a re-entry point of this code) instead of claiming work.
    /// The slot clears it on entry, runs that one workitem from the record
    /// and leaves: [`exit::RESUMED`](crate::exit::RESUMED) when it ran to its end, or through a deopt
    /// exit (whose record takes the same place, the values having been
    /// read). `never_ran` is left empty either way.
    pub reenter: u64,
    /// The part of the range ([`Part`]) the slot claims from first, below
    /// [`LaunchCtx::part_count`] (compiled code takes part 0 for anything
    /// else); the host sets it before the launch (see `Part`).
    pub home: u64,
    /// The values filled in the slot's part of [`LaunchCtx::values`] (the
    /// host empties them after each entry).
    pub values: u64,
    /// The workitem of the first of them (the rest follow it in order).
    pub values_first: i64,
}

// SAFETY: a `LaunchCtx` is shared by the slots of one launch. Everything it
// points to is either atomic (the parts' cursors, `control` and the heap
// cells compiled code updates atomically), read-only during the launch
// (`captures`, the parts' ends, `chunk`), or divided by slot (each slot writes only its own save records
// and `SlotWords`, and with a non-zero
// `own_limit` its own TLAB's state word, all of which the host reads
// only after the slot has returned).
unsafe impl Sync for LaunchCtx {}
// SAFETY: as above; the context holds no thread-affine state.
unsafe impl Send for LaunchCtx {}

/// One part of a launch's range: workitems `cursor ..end` are unclaimed.
/// A slot claims `chunk` workitems at a time from its home part
/// ([`SlotWords::home`]: the runtime gives slot `s` part `s`), and from the
/// next parts in turn once that is spent. The same thread runs a slot
/// launch after launch, so each thread (and the core it stays on) runs the
/// same workitems every launch — their cache lines stay in its caches —
/// and claims from a cursor no other core writes until the ends, where
/// they help each other. On a virtual machine whose two cores sat on
/// different last-level caches (a core-to-core round trip of 340 ns
/// instead of 70), saxpy over 2^20 elements ran 1.7–2.2x slower when the
/// cores swapped halves between launches than when each kept its own.
/// Each part is on cache lines of its own.
#[repr(C, align(128))]
#[derive(Debug)]
pub struct Part {
    /// The part's next unclaimed workitem (claims may push it past `end`).
    pub cursor: AtomicI64,
    /// One past the part's last workitem.
    pub end: i64,
}

impl Part {
    /// `range` cut into `n` (at least 1) parts of as equal lengths as can
    /// be, in order.
    pub fn split(range: std::ops::Range<i64>, n: usize) -> Vec<Part> {
        let n = n.max(1) as i128;
        let (start, len) = (
            i128::from(range.start),
            (i128::from(range.end) - i128::from(range.start)).max(0),
        );
        (0..n)
            .map(|p| Part {
                cursor: AtomicI64::new((start + len * p / n) as i64),
                end: (start + len * (p + 1) / n) as i64,
            })
            .collect()
    }

    /// The claims of `chunk` workitems (at least 1) that `parts` are cut
    /// into while none is claimed: a part's last claim may be shorter.
    pub fn claims(parts: &[Part], chunk: i64) -> u64 {
        let chunk = chunk.max(1) as u64;
        parts
            .iter()
            .map(|p| {
                let lo = p.cursor.load(std::sync::atomic::Ordering::Relaxed);
                (p.end.saturating_sub(lo).max(0) as u64).div_ceil(chunk)
            })
            .sum()
    }
}

/// Byte offsets of the [`LaunchCtx`], [`Part`] and [`SlotWords`] fields,
/// for the code generator (derived from the types).
pub mod offsets {
    use super::{LaunchCtx, Part, SlotWords};
    use std::mem::{offset_of, size_of};

    /// `heap_base`.
    pub const HEAP_BASE: i32 = offset_of!(LaunchCtx, heap_base) as i32;
    /// `parts`.
    pub const PARTS: i32 = offset_of!(LaunchCtx, parts) as i32;
    /// `part_count`.
    pub const PART_COUNT: i32 = offset_of!(LaunchCtx, part_count) as i32;
    /// `chunk`.
    pub const CHUNK: i32 = offset_of!(LaunchCtx, chunk) as i32;
    /// `control`.
    pub const CONTROL: i32 = offset_of!(LaunchCtx, control) as i32;
    /// `save_area`.
    pub const SAVE_AREA: i32 = offset_of!(LaunchCtx, save_area) as i32;
    /// `record_words`.
    pub const RECORD_WORDS: i32 = offset_of!(LaunchCtx, record_words) as i32;
    /// `slots`.
    pub const SLOTS: i32 = offset_of!(LaunchCtx, slots) as i32;
    /// `captures`.
    pub const CAPTURES: i32 = offset_of!(LaunchCtx, captures) as i32;
    /// `records_per_slot`.
    pub const RECORDS_PER_SLOT: i32 = offset_of!(LaunchCtx, records_per_slot) as i32;
    /// `tlabs`.
    pub const TLABS: i32 = offset_of!(LaunchCtx, tlabs) as i32;
    /// `allocator`.
    pub const ALLOCATOR: i32 = offset_of!(LaunchCtx, allocator) as i32;
    /// `large_words`.
    pub const LARGE_WORDS: i32 = offset_of!(LaunchCtx, large_words) as i32;
    /// `own_limit`.
    pub const OWN_LIMIT: i32 = offset_of!(LaunchCtx, own_limit) as i32;
    /// `young`.
    pub const YOUNG: i32 = offset_of!(LaunchCtx, young) as i32;
    /// `nursery`.
    pub const NURSERY: i32 = offset_of!(LaunchCtx, nursery) as i32;
    /// [`LaunchCtx::pages`].
    pub const PAGES: i32 = offset_of!(LaunchCtx, pages) as i32;
    /// [`LaunchCtx::better`].
    pub const BETTER: i32 = offset_of!(LaunchCtx, better) as i32;
    /// [`LaunchCtx::values`].
    pub const VALUES: i32 = offset_of!(LaunchCtx, values) as i32;
    /// [`LaunchCtx::copies`].
    pub const COPIES: i32 = offset_of!(LaunchCtx, copies) as i32;
    /// [`LaunchCtx::copy_rows`].
    pub const COPY_ROWS: i32 = offset_of!(LaunchCtx, copy_rows) as i32;

    /// Bytes from one [`Part`] to the next.
    pub const PART_BYTES: i64 = size_of::<Part>() as i64;
    /// `Part::cursor`.
    pub const PART_CURSOR: i32 = offset_of!(Part, cursor) as i32;
    /// `Part::end`.
    pub const PART_END: i32 = offset_of!(Part, end) as i32;

    /// Bytes from one slot's [`SlotWords`] to the next.
    pub const SLOT_BYTES: i64 = size_of::<SlotWords>() as i64;
    /// `SlotWords::never_ran[0]`.
    pub const SLOT_NEVER_RAN_LO: i32 = offset_of!(SlotWords, never_ran) as i32;
    /// `SlotWords::never_ran[1]`.
    pub const SLOT_NEVER_RAN_HI: i32 = SLOT_NEVER_RAN_LO + size_of::<i64>() as i32;
    /// `SlotWords::completed`.
    pub const SLOT_COMPLETED: i32 = offset_of!(SlotWords, completed) as i32;
    /// `SlotWords::records`.
    pub const SLOT_RECORDS: i32 = offset_of!(SlotWords, records) as i32;
    /// `SlotWords::escaped`.
    pub const SLOT_ESCAPED: i32 = offset_of!(SlotWords, escaped) as i32;
    /// `SlotWords::recycled`.
    pub const SLOT_RECYCLED: i32 = offset_of!(SlotWords, recycled) as i32;
    /// `SlotWords::inject_state`.
    pub const SLOT_INJECT_STATE: i32 = offset_of!(SlotWords, inject_state) as i32;
    /// `SlotWords::slow_result`.
    pub const SLOT_SLOW_RESULT: i32 = offset_of!(SlotWords, slow_result) as i32;
    /// `SlotWords::reenter`.
    pub const SLOT_REENTER: i32 = offset_of!(SlotWords, reenter) as i32;
    /// `SlotWords::home`.
    pub const SLOT_HOME: i32 = offset_of!(SlotWords, home) as i32;
    /// `SlotWords::values`.
    pub const SLOT_VALUES: i32 = offset_of!(SlotWords, values) as i32;
    /// `SlotWords::values_first`.
    pub const SLOT_VALUES_FIRST: i32 = offset_of!(SlotWords, values_first) as i32;
}

/// The compiled slot loop: run workitems until the range is exhausted or the
/// control word says stop; returns a [`crate::exit`] code.
pub type SlotFn = unsafe extern "C" fn(ctx: *const LaunchCtx, slot: u64) -> u32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_range_in_order_and_evenly() {
        for (range, n) in [
            (0..10, 3),
            (5..6, 4),
            (7..7, 2),
            (-3..1 << 20, 2),
            (i64::MIN..i64::MAX, 3),
            (0..100, 1),
        ] {
            let parts = Part::split(range.clone(), n);
            assert_eq!(parts.len(), n);
            let mut at = range.start;
            let len = (i128::from(range.end) - i128::from(range.start)) as u128;
            for p in &parts {
                let lo = p.cursor.load(std::sync::atomic::Ordering::Relaxed);
                assert_eq!(lo, at, "{range:?} / {n}");
                let l = (i128::from(p.end) - i128::from(lo)) as u128;
                assert!(l == len / n as u128 || l == len / n as u128 + 1);
                at = p.end;
            }
            assert_eq!(at, range.end);
        }
        // Claims: per part, its length over the chunk, rounded up.
        assert_eq!(Part::claims(&Part::split(0..10, 3), 2), 2 + 2 + 2);
        assert_eq!(Part::claims(&Part::split(0..1 << 20, 2), 16384), 64);
        assert_eq!(Part::claims(&Part::split(0..3, 4), 5), 3);
    }

    #[test]
    fn the_layout_is_what_generated_code_was_built_against() {
        // Slot words and parts each fill two cache lines (see their docs);
        // every launch-context field is one word.
        assert_eq!(offsets::SLOT_BYTES, 128);
        assert_eq!(align_of::<SlotWords>() as i64, offsets::SLOT_BYTES);
        assert_eq!(offsets::PART_BYTES, 128);
        assert_eq!(size_of::<LaunchCtx>(), 8 * 21);
        assert_eq!(offsets::NURSERY, 120);
        assert_eq!(offsets::PAGES, 128);
        assert_eq!(offsets::BETTER, 136);
        assert_eq!((offsets::COPIES, offsets::COPY_ROWS), (152, 160));
        assert_eq!(offsets::SLOT_HOME, 72);
        assert_eq!(offsets::SLOT_VALUES, 80);
    }
}
