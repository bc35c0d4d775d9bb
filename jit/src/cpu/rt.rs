//! The runtime calls compiled code makes: the allocation slow path.
//!
//! Compiled code runs the TLAB fast path (steps 1–2 of the protocol in
//! `offload_heap::tlab`) inline and calls [`offload_alloc_slow`] for
//! everything else: the designated refill, waiting for another allocator's
//! refill, large objects, policies without TLABs. The slow path is also a
//! safepoint poll.

use offload_abi::control::SAFEPOINT as CONTROL_SAFEPOINT;
use offload_abi::cpu::LaunchCtx;
use offload_heap::{Allocator, Header};
use std::sync::atomic::Ordering;

/// The slow path's answer when the allocation failed (eden exhausted, or an
/// overflow the policy does not wait for): deopt with `AllocationFailure`.
pub const ALLOC_FAILED: u32 = 0;
/// The slow path's answer when a safepoint is requested: the object (if one
/// was carved) was turned into a filler; deopt with `Safepoint` and let the
/// interpreter re-execute the allocation. Real references are at least
/// `HEAP_START_WORDS` (2), so 0 and 1 are free as codes.
pub const ALLOC_SAFEPOINT: u32 = 1;

/// Allocate the object with header words `(tag, word1)` (`header` is
/// `word1 << 32 | tag`) for slot `slot`.
/// `added` non-zero means compiled code already read generation `g` and
/// did its add on the slot's TLAB, which returned `old` without room; the
/// protocol is completed here (this caller may be the designated refiller,
/// so it must be). The answer — the reference, [`ALLOC_FAILED`] or
/// [`ALLOC_SAFEPOINT`] — goes to the slot's `slow_result` word: compiled
/// code calls this through a trampoline that preserves every register
/// (Cranelift's `preserve_all`, which passes no results back), so that
/// the values a kernel keeps in registers need not be spilled around a
/// call that almost never happens.
///
/// # Safety
///
/// `ctx` is the live launch context of the calling slot loop, whose
/// `allocator` points to the launch's [`Allocator`], whose `control` is
/// valid and whose `slots` has an entry for `slot`, the caller's slot.
pub unsafe extern "C" fn offload_alloc_slow(
    ctx: *const LaunchCtx,
    slot: u64,
    header: u64,
    g: u64,
    old: u64,
    added: u32,
) {
    // SAFETY: the caller guarantees `ctx` and what it points to.
    let r = unsafe { alloc_slow(&*ctx, slot, header, g, old, added) };
    // SAFETY: `slots` has an entry for `slot`; each slot writes only its own
    // `SlotWords` while it runs, and the host reads them after it returned.
    unsafe { (*(*ctx).slots.add(slot as usize)).slow_result = u64::from(r) };
}

/// [`offload_alloc_slow`]'s answer.
///
/// # Safety
///
/// As for [`offload_alloc_slow`].
unsafe fn alloc_slow(ctx: &LaunchCtx, slot: u64, header: u64, g: u64, old: u64, added: u32) -> u32 {
    // Never unwind into compiled code: a panic is a failed allocation (the
    // interpreter re-executes it and reports what is wrong).
    std::panic::catch_unwind(|| {
        // SAFETY: `allocator` is the launch's allocator (see `LaunchCtx`).
        let alloc = unsafe { &*ctx.allocator.cast::<Allocator<'_>>() };
        let Some(header) = Header::decode(header as u32, (header >> 32) as u32) else {
            return ALLOC_FAILED;
        };
        let at = if added != 0 {
            alloc.finish(slot as usize, header, g, old)
        } else {
            alloc.alloc(slot as usize, header)
        };
        match at {
            Ok(at) => {
                // SAFETY: `control` is valid for the launch.
                let cw = unsafe { &*ctx.control }.load(Ordering::Acquire);
                if cw & CONTROL_SAFEPOINT != 0 {
                    let size = header.size().unwrap_or(8) as u32;
                    if alloc
                        .heap()
                        .write_header(at, Header::Filler { size })
                        .is_ok()
                    {
                        return ALLOC_SAFEPOINT;
                    }
                }
                at
            }
            Err(_) => ALLOC_FAILED,
        }
    })
    .unwrap_or(ALLOC_FAILED)
}
