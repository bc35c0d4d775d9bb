//! A launch's device state in one block of device memory, kept by the
//! [`super::Gpu`] from one launch to the next (made again only when a
//! launch needs more room), so that a warm run of a grid is one memset,
//! (for a kernel that allocates) one copy up of the eden's bounds, the
//! kernel, one copy back and an event. The context and the captures are
//! no part of it: they are the kernel's parameters.
//!
//! ```text
//! eden | counters | parked | dirty map | TLABs | exits | never-ran | injection | fillers
//! sent
//! └────── summary, copied back ──────┘
//!        └──────────────── zeroed each run ─────────────────┘
//!        └───────────────────── zeroed at a launch's first run ─────────────────────┘
//! ```
//!
//! A kernel that does not allocate gets no eden bounds: its two words are
//! zeroed with the rest.
//!
//! The fillers' part holds the `(offset, header)` pairs the scatter kernel
//! writes into the heap image after a run that refilled TLABs
//! (`resident.rs`): one per TLAB and one for the eden's rest.
//!
//! The fields' meanings are [`offload_abi::gpu::DeviceCtx`]'s; the block's layout is this
//! module's alone.

use super::raw::{DeviceMem, Event, Pinned};
use cudarc::driver::{CudaContext, DriverError, sys};
use offload_abi::gpu::{self, EDEN_WORDS, counter};
use std::sync::Arc;

/// What a launch needs room for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) slots: usize,
    pub(super) tlabs: usize,
    /// Bytes of dirty map (a byte per heap chunk of the image).
    pub(super) map_bytes: usize,
}

/// Byte offsets of each part in the block, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) eden: usize,
    pub(super) stats: usize,
    pub(super) parked: usize,
    pub(super) dirty: usize,
    pub(super) tlabs: usize,
    pub(super) exits: usize,
    pub(super) never: usize,
    pub(super) inject: usize,
    pub(super) fillers: usize,
    pub(super) end: usize,
}

impl Layout {
    pub(super) fn of(s: Shape) -> Layout {
        let w = |n: usize| n * 8;
        let eden = 0;
        let stats = eden + w(EDEN_WORDS);
        let parked = stats + w(counter::COUNT);
        let dirty = parked + 8;
        let tlabs = dirty + s.map_bytes.next_multiple_of(8);
        let exits = tlabs + s.tlabs * gpu::TLAB_BYTES as usize;
        let never = exits + (s.slots * gpu::EXIT_BYTES as usize).next_multiple_of(8);
        let inject = never + s.slots * gpu::NEVER_RAN_BYTES as usize;
        let fillers = inject + s.slots * gpu::INJECT_BYTES as usize;
        let end = fillers + 16 * (s.tlabs + 1);
        Layout {
            eden,
            stats,
            parked,
            dirty,
            tlabs,
            exits,
            never,
            inject,
            fillers,
            end,
        }
    }

    /// Bytes of the summary with `map` bytes of dirty map.
    fn summary_bytes(&self, map: usize) -> usize {
        self.dirty - self.eden + map
    }
}

/// The block, its pinned summary and the event behind each run.
pub(super) struct Block {
    mem: DeviceMem,
    pinned: Pinned,
    pub(super) event: Event,
    pub(super) layout: Layout,
    /// Dirty-map bytes the last run's summary holds.
    map_copied: usize,
}

/// What a run left, from its summary.
pub(super) struct Summary<'a> {
    /// The device eden's words (`gpu::EDEN_TOP`, `gpu::EDEN_LIMIT`).
    pub(super) eden: [u64; EDEN_WORDS],
    /// The run's counters.
    pub(super) counters: [u64; counter::COUNT],
    /// The dirty map below the device eden's end.
    pub(super) map: &'a [u8],
}

impl Block {
    /// A block for `shape`: `kept` when it has the room, a new one
    /// otherwise.
    pub(super) fn fit(
        ctx: &Arc<CudaContext>,
        kept: Option<Block>,
        shape: Shape,
    ) -> Result<Block, DriverError> {
        let layout = Layout::of(shape);
        let summary = layout.summary_bytes(shape.map_bytes);
        match kept {
            Some(mut b) if b.mem.bytes() >= layout.end && b.pinned.bytes() >= summary => {
                b.layout = layout;
                Ok(b)
            }
            kept => {
                // Half again the room, so that slowly growing launches
                // (a heap that grows, more slots) rarely make a new one.
                let event = match kept {
                    Some(b) => b.event,
                    None => Event::new(ctx)?,
                };
                Ok(Block {
                    mem: DeviceMem::new(ctx, layout.end + layout.end / 2)?,
                    pinned: Pinned::new(ctx, summary + summary / 2)?,
                    event,
                    layout,
                    map_copied: 0,
                })
            }
        }
    }

    /// The device address of the part at byte offset `off`.
    pub(super) fn at(&self, off: usize) -> u64 {
        self.mem.at() + off as u64
    }

    /// Issue a run's setup on `stream`: zero what each run starts with
    /// zeroed (and, on a launch's `first` run, the never-ran rests and the
    /// injection states too), then send the eden's bounds if the kernel
    /// allocates (`eden`; zeroed otherwise). Returns the bytes sent.
    pub(super) fn begin(
        &mut self,
        first: bool,
        eden: Option<[u64; EDEN_WORDS]>,
        stream: sys::CUstream,
    ) -> Result<u64, DriverError> {
        let l = self.layout;
        let zero_end = if first { l.fillers } else { l.never };
        let zero_from = if eden.is_some() { l.stats } else { l.eden };
        // SAFETY: `[zero_from, zero_end)` lies in the block (`fit` made it
        // at least `layout.end` long), used only on this stream.
        unsafe { super::raw::memset(self.at(zero_from), 0, zero_end - zero_from, stream) }?;
        let Some(bounds) = eden else { return Ok(0) };
        // SAFETY: the bounds are the block's `[eden, stats)`; `send` copies
        // them before it returns.
        unsafe { super::raw::send(self.at(l.eden), &bounds, stream) }?;
        Ok(8 * bounds.len() as u64)
    }

    /// Issue the copy back of the summary, with `map` bytes of the dirty
    /// map, and record the event behind it.
    pub(super) fn collect(&mut self, map: usize, stream: sys::CUstream) -> Result<(), DriverError> {
        let l = self.layout;
        let map = map.min(l.tlabs - l.dirty);
        let n = l.summary_bytes(map);
        let src = self.at(l.eden);
        self.pinned.copy_from(0, src, n, stream)?;
        self.map_copied = map;
        self.event.record(stream)
    }

    /// Bytes the last summary held.
    pub(super) fn summary_bytes(&self) -> u64 {
        self.layout.summary_bytes(self.map_copied) as u64
    }

    /// The last run's summary. Only call once its event is done.
    pub(super) fn summary(&self) -> Summary<'_> {
        let l = self.layout;
        let b = self.pinned.read();
        let word = |off: usize| {
            let at = off - l.eden;
            u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
        };
        let at = l.dirty - l.eden;
        Summary {
            eden: std::array::from_fn(|i| word(l.eden + 8 * i)),
            counters: std::array::from_fn(|i| word(l.stats + 8 * i)),
            map: &b[at..at + self.map_copied],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_follow_each_other_aligned() {
        let l = Layout::of(Shape {
            slots: 1000,
            tlabs: 32,
            map_bytes: 13,
        });
        assert_eq!(l.eden, 0);
        assert_eq!(l.stats, l.eden + 16);
        assert_eq!(l.dirty, l.parked + 8);
        // The map is rounded up to whole words.
        assert_eq!(l.tlabs, l.dirty + 16);
        assert_eq!(l.fillers - l.inject, 8000);
        assert_eq!(l.end - l.fillers, 16 * 33);
        assert_eq!(l.never - l.exits, 1000);
        for off in [
            l.eden, l.stats, l.parked, l.dirty, l.tlabs, l.exits, l.never, l.inject,
        ] {
            assert_eq!(off % 8, 0);
        }
        let none = Layout::of(Shape {
            slots: 1,
            tlabs: 0,
            map_bytes: 0,
        });
        assert_eq!(none.summary_bytes(0), 16 + 8 * counter::COUNT + 8);
    }
}
