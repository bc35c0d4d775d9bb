//! Side bitmaps over heap words, shared by the collector's workers.

use std::sync::atomic::{AtomicU64, Ordering};

/// One bit per heap word, set and read with atomics so that every worker
/// may mark at once.
pub(super) struct Bits {
    words: Vec<AtomicU64>,
}

impl Bits {
    /// A clear bitmap for words `[0, n)`.
    pub(super) fn new(n: u64) -> Bits {
        Bits {
            words: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Set bit `i`; whether it was clear (this caller set it).
    #[inline]
    pub(super) fn test_and_set(&self, i: u32) -> bool {
        let (w, b) = ((i >> 6) as usize, 1u64 << (i & 63));
        // A plain load first: most tests of an already-marked object then
        // cost no write to a shared line.
        if self.words[w].load(Ordering::Relaxed) & b != 0 {
            return false;
        }
        self.words[w].fetch_or(b, Ordering::Relaxed) & b == 0
    }

    /// Set the bits of `bits` in word `w`.
    #[inline]
    pub(super) fn or_word(&self, w: usize, bits: u64) {
        self.words[w].fetch_or(bits, Ordering::Relaxed);
    }

    /// The 64 bits of word `w` (bits `64w ..`).
    #[inline]
    pub(super) fn word(&self, w: usize) -> u64 {
        self.words[w].load(Ordering::Relaxed)
    }

    /// Number of 64-bit words.
    pub(super) fn len(&self) -> usize {
        self.words.len()
    }

    /// The set bits in words `[from, to)` of the bitmap, in order.
    pub(super) fn ones(&self, from: usize, to: usize) -> impl Iterator<Item = u32> + '_ {
        (from..to).flat_map(move |w| {
            let mut bits = self.word(w);
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                Some((w as u32) << 6 | b)
            })
        })
    }
}

/// Bits `[a, b)` as (word, mask) pairs, in order: one per word they
/// touch.
pub(super) fn range_words(a: u64, b: u64) -> impl Iterator<Item = (usize, u64)> {
    let mut i = a;
    std::iter::from_fn(move || {
        if i >= b {
            return None;
        }
        let lo = i & 63;
        let hi = (b - (i - lo)).min(64);
        let mask = if hi - lo == 64 {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        let w = (i >> 6) as usize;
        i = i - lo + hi;
        Some((w, mask))
    })
}

#[cfg(test)]
mod tests {
    use super::{Bits, range_words};

    #[test]
    fn ranges_across_words_set_exactly_their_bits() {
        for (a, b) in [(0, 1), (3, 64), (60, 70), (64, 128), (5, 200), (127, 129)] {
            let bits = Bits::new(256);
            for (w, mask) in range_words(a, b) {
                bits.or_word(w, mask);
            }
            let got: Vec<u32> = bits.ones(0, bits.len()).collect();
            let want: Vec<u32> = (a as u32..b as u32).collect();
            assert_eq!(got, want, "[{a}, {b})");
        }
    }

    #[test]
    fn test_and_set_reports_the_first_setter() {
        let bits = Bits::new(100);
        assert!(bits.test_and_set(70));
        assert!(!bits.test_and_set(70));
        assert_eq!(bits.ones(0, 2).collect::<Vec<_>>(), [70]);
    }
}
