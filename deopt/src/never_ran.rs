//! Work that never started, in O(C).

use std::ops::Range;

/// The workitems of a launch that never started: each slot's unstarted rest
/// of its chunk (at most one range per slot) plus the untouched tail of the
/// range, `[cursor, end)`. Its size is O(C) however large the range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NeverRan {
    /// Per slot, the unstarted rest of the chunk it was running (empty if none).
    pub slots: Vec<Range<i64>>,
    /// `[cursor, end)`: never claimed by any slot.
    pub rest: Range<i64>,
}

impl NeverRan {
    /// Nothing unstarted yet, for `slots` slots.
    pub fn new(slots: usize) -> NeverRan {
        NeverRan {
            slots: vec![0..0; slots],
            rest: 0..0,
        }
    }

    /// Record that `slot` stopped before starting `rest` of its chunk.
    pub fn set_slot(&mut self, slot: usize, rest: Range<i64>) {
        if slot >= self.slots.len() {
            self.slots.resize(slot + 1, 0..0);
        }
        self.slots[slot] = rest;
    }

    /// Every non-empty range, slots first.
    pub fn ranges(&self) -> impl Iterator<Item = Range<i64>> + '_ {
        self.slots
            .iter()
            .cloned()
            .chain(std::iter::once(self.rest.clone()))
            .filter(|r| r.start < r.end)
    }

    /// How many workitems never ran.
    pub fn count(&self) -> u64 {
        self.ranges().map(|r| (r.end - r.start) as u64).sum()
    }

    /// Whether every workitem started.
    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }
}
