//! Forwarding: where each live word goes, from the live-word bitmap that
//! marking fills — per 64 heap words, their live bits and the new address
//! of the first (the "Compressor" scheme: an object's new address is that
//! plus a popcount), with the padding the slide puts before some objects
//! (a turn to a page of another tag, a colour gap's cache-line alignment).
//!
//! The table is built on every worker: the live words before each block
//! within a piece of blocks, in parallel; then, on one thread, each
//! piece's start and the padding, which depends on where an object lands
//! (a turn pads to the next page boundary) and so on everything before
//! it, but is needed only at the few padded objects; then every block's
//! base, in parallel. On one thread the whole table took 4.5 ms of a
//! 100 MiB collection's pause.

use super::bits::Bits;
use crate::alloc::aligned_pad;
use crate::layout::HEAP_START_WORDS;
use crate::pages::page_up;
use rayon::prelude::*;

/// A live object before which the slide may pad: a colour gap, an
/// object whose page tag differs from the one before (a turn), or both.
pub(super) struct Point {
    at: u32,
    gap: bool,
    turn: bool,
}

/// The colour gaps and turns (both in address order) merged, in address
/// order.
pub(super) fn merge_points<'a>(
    gaps: &'a [u32],
    turns: &'a [u32],
) -> impl Iterator<Item = Point> + 'a {
    let (mut g, mut t) = (gaps.iter().peekable(), turns.iter().peekable());
    std::iter::from_fn(move || {
        let at = match (g.peek(), t.peek()) {
            (Some(&&a), Some(&&b)) => a.min(b),
            (Some(&&a), None) => a,
            (None, Some(&&b)) => b,
            (None, None) => return None,
        };
        let gap = g.next_if(|&&a| a == at).is_some();
        let turn = t.next_if(|&&b| b == at).is_some();
        Some(Point { at, gap, turn })
    })
}

/// Where live objects go: per 64 heap words, which of them are live and
/// the new address of the first live one (colour gaps' padding included:
/// see `Heap::collect`).
pub(super) struct Forwarding {
    blocks: Vec<Block>,
    /// The padded objects, in address order, with their padding: an object
    /// at or after one in the same 64 words goes that much further.
    pub(super) pads: Vec<(u32, u32)>,
    /// Every live word below this one stays where it is
    /// ([`Forwarding::stays_below`]; 0 until it is known).
    pub(super) still: u32,
    /// The end of the live data after the slide (eden's new top), in
    /// words.
    pub(super) end: u32,
}

/// 64 heap words: a bit per live word, and the new address of the first;
/// side by side, so that finding a new address reads one cache line.
#[derive(Clone, Copy)]
struct Block {
    live: u64,
    base: u32,
    /// Some object among them has padding before it (a colour gap or a
    /// turn, `Point`).
    padded: bool,
}

impl Forwarding {
    /// The live bits of block `w`.
    #[inline(always)]
    pub(super) fn word(&self, w: usize) -> u64 {
        self.blocks[w].live
    }

    /// The new address of block `w`'s first live word (the end of the live
    /// data for the block past the last).
    pub(super) fn base(&self, w: usize) -> u64 {
        u64::from(self.blocks.get(w).map_or(self.end, |b| b.base))
    }

    /// The number of blocks.
    pub(super) fn len(&self) -> usize {
        self.blocks.len()
    }

    /// The new address of the live word at `r`.
    #[inline(always)]
    pub(super) fn of(&self, r: u32) -> u32 {
        if r < self.still {
            return r;
        }
        let b = self.blocks[(r >> 6) as usize];
        let to = b.base + (b.live & ((1u64 << (r & 63)) - 1)).count_ones();
        if !b.padded {
            return to;
        }
        to + self.padding_before(r)
    }

    /// The first heap word from which live words may move: every live word
    /// below it stays where it is (its new address is its own). A block
    /// without padding stays when its live words are one run that starts
    /// at its new base; one with padding, when each object that starts in
    /// it stays (an object's words move with its first).
    pub(super) fn stays_below(&self, marks: &Bits) -> u32 {
        for (w, b) in self.blocks.iter().enumerate() {
            let at = (w as u32) << 6;
            if b.live == 0 {
                continue;
            }
            if b.padded {
                if let Some(r) = marks.ones(w, w + 1).find(|&r| self.of(r) != r) {
                    return r;
                }
                continue;
            }
            let first = b.live.trailing_zeros();
            if b.base != at + first {
                return at + first;
            }
            // The first run of live words stays; a word after a gap in it
            // would move down.
            let run = (!(b.live >> first)).trailing_zeros();
            if first + run < 64 && b.live >> (first + run) != 0 {
                return at + first + run;
            }
        }
        // Every live word stays: the end of the last block.
        u32::try_from(self.blocks.len() << 6).unwrap_or(u32::MAX)
    }

    /// The padding inside `r`'s block of 64 words below `r` (a block with
    /// padding is rare: a page's worth of objects or more per turn).
    #[cold]
    #[inline(never)]
    fn padding_before(&self, r: u32) -> u32 {
        let first = self.pads.partition_point(|&(at, _)| at >> 6 < r >> 6);
        self.pads[first..]
            .iter()
            .take_while(|&&(at, _)| at <= r)
            .map(|&(_, words)| words)
            .sum::<u32>()
    }
}

/// Blocks per piece of the parallel build: 2 MiB of heap.
const PIECE: usize = 4096;

impl Forwarding {
    /// The forwarding of the live words `live` with padding before the
    /// objects `points` (in address order; see [`Point`]).
    pub(super) fn build(live: &Bits, points: impl Iterator<Item = Point>) -> Forwarding {
        let n = live.len();
        // Each block's live words before it within its piece (for now in
        // `base`), and each piece's live words.
        let mut blocks: Vec<Block> = Vec::with_capacity(n);
        blocks.resize(
            n,
            Block {
                live: 0,
                base: 0,
                padded: false,
            },
        );
        let totals: Vec<u32> = blocks
            .par_chunks_mut(PIECE)
            .enumerate()
            .map(|(i, piece)| {
                let mut acc = 0u32;
                for (k, b) in piece.iter_mut().enumerate() {
                    let word = live.word(i * PIECE + k);
                    *b = Block {
                        live: word,
                        base: acc,
                        padded: false,
                    };
                    acc += word.count_ones();
                }
                acc
            })
            .collect();
        // Each piece's first new address, and the padding, in address
        // order: where a padded object lands depends on all before it.
        let mut starts = Vec::with_capacity(totals.len());
        let mut pads: Vec<(u32, u32)> = Vec::new();
        // Per piece, after each padded object's block, the padding so far
        // within the piece.
        let mut within: Vec<Vec<(usize, u32)>> = vec![Vec::new(); totals.len()];
        let mut points = points.peekable();
        let mut next = HEAP_START_WORDS;
        for (i, &total) in totals.iter().enumerate() {
            starts.push(next);
            let mut extra = 0u32;
            let end = (i + 1) * PIECE;
            while let Some(p) = points.next_if(|p| ((p.at >> 6) as usize) < end) {
                let w = (p.at >> 6) as usize;
                let b = blocks[w];
                let to =
                    next + b.base + extra + (b.live & ((1u64 << (p.at & 63)) - 1)).count_ones();
                let pad = padding(&p, to);
                debug_assert!(to + pad <= p.at);
                if pad > 0 {
                    pads.push((p.at, pad));
                    extra += pad;
                    within[i].push((w, extra));
                }
            }
            next += total + extra;
        }
        // Every block's base: its piece's start, the live words before it
        // in the piece, and the padding before it in the piece (of objects
        // in earlier blocks: a block's base is its first live word's new
        // address before any padding inside it).
        blocks
            .par_chunks_mut(PIECE)
            .enumerate()
            .for_each(|(i, piece)| {
                let mut runs = within[i].iter().peekable();
                let mut extra = 0;
                for (k, b) in piece.iter_mut().enumerate() {
                    let w = i * PIECE + k;
                    while let Some(&(_, e)) = runs.next_if(|&&(pw, _)| pw < w) {
                        extra = e;
                    }
                    b.base += starts[i] + extra;
                }
            });
        for &(at, _) in &pads {
            blocks[(at >> 6) as usize].padded = true;
        }
        Forwarding {
            blocks,
            pads,
            still: 0,
            end: next,
        }
    }

    /// The words of padding in all.
    pub(super) fn padding(&self) -> u64 {
        self.pads.iter().map(|&(_, words)| u64::from(words)).sum()
    }
}

/// The padding before the object `p` when it lands at `to`.
fn padding(p: &Point, to: u32) -> u32 {
    // An object whose page tag differs from the one before starts a page
    // of its own (`crate::pages`): the one before ended below this
    // object's page (a page an object runs into has that object's tag), so
    // this fits below it.
    let mut pad = if p.turn {
        page_up(u64::from(to)) as u32 - to
    } else {
        0
    };
    // A colour gap (nothing else starts after it in its 64: a gap is 2,048
    // words) gets padding before it, so that the large array after it
    // keeps its elements on a cache line (`Allocator::alloc_host`); the
    // padding comes out of the space freed below it, so nothing moves up.
    if p.gap {
        let line = aligned_pad(to + pad + super::mark::GAP_WORDS);
        if to + pad + line <= p.at {
            pad += line;
        }
    }
    pad
}

#[cfg(test)]
mod tests {
    use super::{Bits, Block, Forwarding, Point};
    use crate::layout::HEAP_START_WORDS;

    /// The forwarding of live words `live` (and object starts `starts`)
    /// with padding `pads` (object, words) — as `Heap::collect` builds it.
    fn forwarding(live: &[u64], pads: &[(u32, u32)]) -> Forwarding {
        let mut next = HEAP_START_WORDS;
        let mut blocks = Vec::new();
        for (w, &word) in live.iter().enumerate() {
            blocks.push(Block {
                live: word,
                base: next,
                padded: pads.iter().any(|&(at, _)| (at >> 6) as usize == w),
            });
            next += word.count_ones();
            next += pads
                .iter()
                .filter(|&&(at, _)| (at >> 6) as usize == w)
                .map(|&(_, p)| p)
                .sum::<u32>();
        }
        Forwarding {
            blocks,
            pads: pads.to_vec(),
            still: 0,
            end: next,
        }
    }

    /// Bits for every live word in `live` that starts a run (one object
    /// per run of live words).
    fn starts(live: &[u64]) -> Bits {
        let bits = Bits::new(live.len() as u64 * 64);
        for (w, &word) in live.iter().enumerate() {
            let before = if w == 0 { 0 } else { live[w - 1] >> 63 };
            let s = word & !(word << 1 | before);
            if s != 0 {
                bits.or_word(w, s);
            }
        }
        bits
    }

    /// A xorshift generator from `seed` (the cases are the same every
    /// run).
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    fn live_words(live: &[u64]) -> impl Iterator<Item = u32> + '_ {
        (0..live.len() as u32 * 64).filter(|&r| live[(r >> 6) as usize] >> (r & 63) & 1 != 0)
    }

    /// Every live word below `still` keeps its address, and the first live
    /// word from it on (if any) moves: what stays is found exactly.
    #[test]
    fn what_stays_is_every_live_word_before_the_first_that_moves() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..2000 {
            let n = 1 + (next() % 6) as usize;
            let mut live: Vec<u64> = (0..n)
                .map(|_| match next() % 4 {
                    0 => u64::MAX,
                    1 => 0,
                    2 => u64::MAX << (next() % 64),
                    _ => next(),
                })
                .collect();
            // The heap's first words are its own, never an object's.
            live[0] &= !0b11;
            if case % 3 == 0 {
                // Dense from the start for a while.
                live[0] |= !0b11;
            }
            let fwd = forwarding(&live, &[]);
            let still = fwd.stays_below(&starts(&live));
            for r in live_words(&live) {
                if r < still {
                    assert_eq!(fwd.of(r), r, "case {case}: word {r} below {still} moves");
                }
            }
            if let Some(r) = live_words(&live).find(|&r| r >= still) {
                assert_ne!(
                    fwd.of(r),
                    r,
                    "case {case}: word {r}, the first from {still}, stays"
                );
            }
        }
    }

    /// Padding that fills the gap before an object exactly (a turn to a
    /// new page after a filler) keeps it, and what follows, in place.
    #[test]
    fn padding_that_fills_a_gap_keeps_what_follows_in_place() {
        // Words 2..40 live, 40..64 dead, 64..128 live: the object at 64
        // padded by the 24 words of the gap.
        let live = [!0u64 >> 24 & !0b11, u64::MAX];
        let fwd = forwarding(&live, &[(64, 24)]);
        let marks = starts(&live);
        assert_eq!(fwd.of(64), 64);
        assert_eq!(fwd.stays_below(&marks), 128);
        // Padded by less: the object moves down.
        let fwd = forwarding(&live, &[(64, 8)]);
        assert_eq!(fwd.stays_below(&marks), 64);
    }

    /// A block as [`sequential`] builds it: live bits, base, padded.
    type Seq = (u64, u32, bool);

    /// The table as one thread built it before (each block in turn, the
    /// padding where an object lands): the parallel build's reference.
    fn sequential(live: &Bits, points: &[Point]) -> (Vec<Seq>, Vec<(u32, u32)>, u32) {
        let mut blocks = Vec::new();
        let mut pads = Vec::new();
        let mut next = HEAP_START_WORDS;
        let mut points = points.iter().peekable();
        for w in 0..live.len() {
            let word = live.word(w);
            blocks.push((word, next, false));
            while let Some(p) = points.next_if(|p| (p.at >> 6) as usize == w) {
                let to = next + (word & ((1u64 << (p.at & 63)) - 1)).count_ones();
                let pad = super::padding(p, to);
                if pad > 0 {
                    pads.push((p.at, pad));
                }
                next += pad;
            }
            next += word.count_ones();
        }
        for &(at, _) in &pads {
            blocks[(at >> 6) as usize].2 = true;
        }
        (blocks, pads, next)
    }

    /// Built on every worker, the table is the one thread's, over several
    /// pieces, with turns (page-aligned objects of another tag, padded
    /// to a page) and colour gaps anywhere among them.
    #[test]
    fn the_parallel_build_is_the_sequential_one() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        let mut pads_seen = 0;
        for case in 0..40 {
            // Up to three pieces and a bit.
            let n = 1 + (next() % (3 * super::PIECE as u64 + 100)) as usize;
            let live = Bits::new(n as u64 * 64);
            for w in 0..n {
                let word = match next() % 5 {
                    0 => 0,
                    1 => u64::MAX,
                    _ => next() & next(),
                };
                live.or_word(w, if w == 0 { word & !0b11 } else { word });
            }
            // Live words on page starts as turns, and a few gaps.
            let words = n as u32 * 64;
            let mut points: Vec<Point> = Vec::new();
            for _ in 0..(next() % 200) {
                let at = (next() % u64::from(words)) as u32;
                let (turn, at) = if next().is_multiple_of(2) {
                    (true, at & !(offload_abi::pages::PAGE_WORDS - 1))
                } else {
                    (false, at)
                };
                if at < 2 || live.word((at >> 6) as usize) >> (at & 63) & 1 == 0 {
                    continue;
                }
                points.push(Point {
                    at,
                    gap: !turn,
                    turn,
                });
            }
            points.sort_by_key(|p| p.at);
            points.dedup_by_key(|p| p.at);
            let (blocks, pads, end) = sequential(&live, &points);
            pads_seen += pads.len();
            let again: Vec<Point> = points
                .iter()
                .map(|p| Point {
                    at: p.at,
                    gap: p.gap,
                    turn: p.turn,
                })
                .collect();
            let fwd = Forwarding::build(&live, again.into_iter());
            assert_eq!(fwd.end, end, "case {case}: the end");
            assert_eq!(fwd.pads, pads, "case {case}: the padding");
            for (w, &(word, base, padded)) in blocks.iter().enumerate() {
                let b = fwd.blocks[w];
                assert_eq!(
                    (b.live, b.base, b.padded),
                    (word, base, padded),
                    "case {case}: block {w}"
                );
            }
        }
        assert!(pads_seen > 100, "the cases pad objects: {pads_seen}");
    }
}
