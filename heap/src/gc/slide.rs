//! The slide: every live word moves down to its new address, on every
//! worker of the calling rayon pool, and the references in each object
//! moved are updated where it lands (while it is still in cache).
//!
//! Sliding one object at a time in address order never overwrites an
//! object not yet moved (each goes down or stays), but it is serial and
//! pays a header decode and a loop per object. Here the live words are cut
//! into *chunks* of about [`CHUNK_WORDS`] live words (at bitmap-word
//! boundaries where no object runs across), and a chunk moves its
//! *pieces* — runs of adjacent live objects, split where padding goes
//! before an object — with one `memmove` each, in address order, then
//! walks the piece's objects at their new place to update their
//! references (a piece holds whole objects, so its walk parses).
//!
//! Chunk `k` writes only its destination `[D_k, E_k)`, which lies at or
//! below its own live words; a later chunk's live words all lie above
//! `E_k`. So chunk `k` may start once every earlier chunk with live words
//! in `[D_k, E_k)` has moved them out. Chunks run in *waves*: a chunk's
//! wave is one more than the latest wave among the chunks it waits for,
//! and the chunks of a wave move at once (no two of them touch the same
//! word: one's destination never meets another's live words). How many
//! waves that makes depends on where the garbage lies:
//!
//! * garbage all below the live data (everything slides down whole): one
//!   wave — each destination lies in garbage;
//! * garbage spread evenly, half the heap (the collector's steady state
//!   with a heap of twice the live data): chunk `k`'s destination is about
//!   where chunk `k / 2` lay, so about log2(chunks) waves, each twice the
//!   one before;
//! * a heap that is nearly all live past its dense prefix: each
//!   destination overlaps the chunk just before, one chunk per wave — the
//!   serial slide, still one `memmove` per piece.
//!
//! This is the wave scheduling of region-based parallel compaction (as in
//! HotSpot's parallel mark-compact, where a region is filled once the
//! regions it overlaps have been emptied), with the dependencies known
//! before anything moves because the forwarding table already says where
//! every live word goes.

use super::bits::Bits;
use super::forward::Forwarding;
use super::mark::{header, update_object};
use crate::heap::ClassShape;
use crate::layout::Header;
use crate::region::Region;
use rayon::prelude::*;
use std::sync::atomic::{AtomicU32, Ordering};

/// Live words per chunk (256 KiB): large enough that a wave's fork and
/// join cost nothing next to its copies, small enough that a 10 MiB heap
/// has work for every worker.
const CHUNK_WORDS: u64 = 1 << 15;

/// Live words `[lo, hi)` (heap words) in bitmap words `blocks`, whose
/// destination is `[dest, dest_end)`.
struct Chunk {
    blocks: std::ops::Range<usize>,
    lo: u64,
    hi: u64,
    dest: u64,
    dest_end: u64,
    wave: usize,
}

/// The bits of bitmap word `w` for words at or past `from` (all of them
/// past `from`'s word).
fn at_or_past(w: usize, from: u32) -> u64 {
    match (w as u32).cmp(&(from >> 6)) {
        std::cmp::Ordering::Less => 0,
        std::cmp::Ordering::Equal => !0u64 << (from & 63),
        std::cmp::Ordering::Greater => !0,
    }
}

/// The slide of one collection: what it reads and writes.
pub(super) struct Slide<'a> {
    pub(super) region: &'a Region,
    pub(super) cells: &'a [AtomicU32],
    pub(super) shapes: &'a [ClassShape],
    /// A bit per live object start.
    pub(super) marks: &'a Bits,
    pub(super) fwd: &'a Forwarding,
    /// The first bitmap word past the blocks whose objects stay where
    /// they are (`Forwarding::stays_below`).
    pub(super) from_block: usize,
}

impl Slide<'_> {
    /// Move every live word past the dense prefix to its new address,
    /// update the references in the objects there, and write the fillers
    /// of the padding before objects; the number of words that moved.
    ///
    /// # Safety
    ///
    /// The caller has the heap to itself (see `Heap::collect`), and no
    /// object past the dense prefix has had its references updated.
    pub(super) unsafe fn run(&self) -> u64 {
        let chunks = self.chunks();
        let waves = chunks.iter().map(|c| c.wave + 1).max().unwrap_or(0);
        let mut by_wave: Vec<Vec<&Chunk>> = (0..waves).map(|_| Vec::new()).collect();
        for c in &chunks {
            by_wave[c.wave].push(c);
        }
        let mut moved = 0;
        for wave in by_wave {
            // The chunks of one wave read and write disjoint words (the
            // module's docs), and every earlier wave has finished.
            moved += match wave.as_slice() {
                // SAFETY: the caller has the heap to itself; this is the
                // wave's only chunk.
                [one] => unsafe { self.move_chunk(one) },
                _ => wave
                    .par_iter()
                    // SAFETY: the caller has the heap to itself, and no
                    // other chunk of the wave touches this one's words.
                    .map(|c| unsafe { self.move_chunk(c) })
                    .sum::<u64>(),
            };
        }
        moved
    }

    /// The chunks past the dense prefix that hold live words, with their
    /// waves.
    fn chunks(&self) -> Vec<Chunk> {
        let live = self.fwd;
        let mut chunks: Vec<Chunk> = Vec::new();
        // The first object that starts past the dense prefix: the words
        // before it are the end of the prefix's last object, in place.
        let Some(begin) = self.marks.ones(self.from_block, live.len()).next() else {
            return chunks;
        };
        let mut w = self.from_block;
        while w < live.len() {
            let start = w;
            let mut words = 0u64;
            let (mut lo, mut hi) = (None, 0u64);
            // Past its size, a chunk still takes the words of an object
            // running across its end.
            while w < live.len() && (words < CHUNK_WORDS || (w > start && self.runs_across(w))) {
                let bits = live.word(w) & at_or_past(w, begin);
                if bits != 0 {
                    lo.get_or_insert((w as u64) << 6 | u64::from(bits.trailing_zeros()));
                    hi = ((w as u64 + 1) << 6) - u64::from(bits.leading_zeros());
                    words += u64::from(bits.count_ones());
                }
                w += 1;
            }
            let Some(lo) = lo else { break };
            let dest = self.fwd.base(start);
            let dest_end = self.fwd.base(w);
            // The earlier chunks with live words in this one's destination
            // (their `hi` grows with their index).
            let wave = chunks
                .iter()
                .rev()
                .take_while(|j| j.hi > dest)
                .filter(|j| j.lo < dest_end)
                .map(|j| j.wave + 1)
                .max()
                .unwrap_or(0);
            chunks.push(Chunk {
                blocks: start..w,
                lo,
                hi,
                dest,
                dest_end,
                wave,
            });
        }
        chunks
    }

    /// Whether an object runs from bitmap word `w - 1` into word `w`: the
    /// first word of `w` is live but starts no object.
    fn runs_across(&self, w: usize) -> bool {
        self.fwd.word(w) & 1 != 0 && self.marks.word(w) & 1 == 0
    }

    /// Move one chunk's pieces, in address order; the words moved.
    ///
    /// # Safety
    ///
    /// No other thread reads or writes the chunk's live words or its
    /// destination while this runs.
    unsafe fn move_chunk(&self, c: &Chunk) -> u64 {
        let live = self.fwd;
        let pads = &self.fwd.pads;
        let (lo, hi) = ((c.blocks.start as u32) << 6, (c.blocks.end as u32) << 6);
        let first = pads.partition_point(|&(at, _)| at < lo);
        let mut pads = pads[first..]
            .iter()
            .take_while(|&&(at, _)| at < hi)
            .peekable();
        let mut moved = 0;
        let mut piece: Option<(u32, u32)> = None;
        for w in c.blocks.clone() {
            let mut bits = live.word(w) & at_or_past(w, c.lo as u32);
            while bits != 0 {
                let s = bits.trailing_zeros();
                let len = (!(bits >> s)).trailing_zeros().min(64 - s);
                let start = (w as u32) << 6 | s;
                bits &= if s + len == 64 { 0 } else { !0u64 << (s + len) };
                match &mut piece {
                    Some((_, end)) if *end == start => *end += len,
                    _ => {
                        if let Some((a, b)) = piece.take() {
                            // SAFETY: passed on from the caller.
                            moved += unsafe { self.move_piece(a, b, &mut pads) };
                        }
                        piece = Some((start, start + len));
                    }
                }
            }
        }
        if let Some((a, b)) = piece {
            // SAFETY: passed on from the caller.
            moved += unsafe { self.move_piece(a, b, &mut pads) };
        }
        debug_assert!(c.lo >= u64::from(lo) && c.hi <= u64::from(hi));
        debug_assert!(c.dest <= c.lo && c.dest_end <= c.hi);
        moved
    }

    /// Move the live words `[a, b)` (adjacent live objects), split where
    /// padding goes before one of them (the next of `pads`, which are in
    /// address order): the filler of the padding is written first, then
    /// the words from that object on move behind it.
    ///
    /// # Safety
    ///
    /// As for [`Slide::move_chunk`].
    unsafe fn move_piece<'p>(
        &self,
        a: u32,
        b: u32,
        pads: &mut std::iter::Peekable<impl Iterator<Item = &'p (u32, u32)>>,
    ) -> u64 {
        let mut moved = 0;
        let mut from = a;
        loop {
            let until = match pads.peek() {
                Some(&&(at, _)) if at < b => at,
                _ => b,
            };
            if until > from {
                let to = self.fwd.of(from);
                if to != from {
                    // SAFETY: the words lie in this chunk, their
                    // destination in its destination (the caller's
                    // contract); the region checks both are committed.
                    unsafe {
                        self.region
                            .move_words(from as usize, to as usize, (until - from) as usize)
                    };
                    moved += u64::from(until - from);
                }
                self.update(to, to + (until - from));
            }
            if until == b {
                return moved;
            }
            let &(at, words) = pads.next().expect("peeked");
            debug_assert!(at >= from, "padding before a word already moved");
            // The filler lies below the object's new address, in this
            // chunk's destination, below every word not yet moved.
            let to = self.fwd.of(at) - words;
            let (h0, h1) = Header::Filler { size: words * 8 }
                .encode()
                .expect("a filler's header encodes");
            self.cells[to as usize * 2].store(h0, Ordering::Relaxed);
            self.cells[to as usize * 2 + 1].store(h1, Ordering::Relaxed);
            from = at;
        }
    }

    /// Update the references in the objects that now lie in `[a, b)`
    /// (whole objects, side by side).
    fn update(&self, a: u32, b: u32) {
        let fwd = |r| self.fwd.of(r);
        let mut r = a;
        while r < b {
            // Marking decoded every marked header; the default never
            // happens.
            let h = header(self.cells, r).unwrap_or(Header::Filler { size: 8 });
            update_object(self.cells, self.shapes, r, h, &fwd);
            r += h.size().map_or(1, |s| s.div_ceil(8).max(1)) as u32;
        }
        debug_assert_eq!(r, b, "a piece holds whole objects");
    }
}
