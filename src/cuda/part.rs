//! A GPU's part of a launch split over devices (`crate::split`): the
//! chunks its kernel may write are registered with the heap's twins for
//! the part's life, and every send to it goes from twins with host stores
//! kept out (`offload_heap::twins`), so that the other devices' parts, the
//! replays and the CPU's part writing other elements of the same chunks
//! all keep their writes.

use super::resident::DeviceHeap;
use crate::error::OffloadError;
use offload_heap::Heap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// A part's registration with the heap's twins (ended when dropped).
pub(super) struct PartWrite<'h> {
    heap: &'h Heap,
    /// The heap's token for it (0: not registered yet).
    token: AtomicU64,
}

impl<'h> PartWrite<'h> {
    pub(super) fn new(heap: &'h Heap) -> PartWrite<'h> {
        PartWrite {
            heap,
            token: AtomicU64::new(0),
        }
    }

    /// Register (again) the part's kernel as writing `footprint`, and send
    /// the device the stale chunks of it, from twins, except those of
    /// `fresh` (the chunks wholly inside its device eden now, which the
    /// device zeroes). Returns the bytes sent.
    pub(super) fn send(
        &self,
        dh: &DeviceHeap,
        footprint: &[Range<usize>],
        fresh: Range<usize>,
    ) -> Result<u64, OffloadError> {
        let t = self.token.load(Ordering::Acquire);
        let (t, sent) = self.heap.send_for_write(
            dh.id(),
            footprint,
            fresh,
            (t != 0).then_some(t),
            &mut |chunks| dh.push_chunks(chunks).map_err(|e| e.to_string()),
        )?;
        self.token.store(t, Ordering::Release);
        Ok(sent)
    }
}

impl Drop for PartWrite<'_> {
    fn drop(&mut self) {
        let t = *self.token.get_mut();
        if t != 0 {
            self.heap.end_write(t);
        }
    }
}
