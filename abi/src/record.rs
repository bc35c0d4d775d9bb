//! Which save record a slot writes: slot `s` of a launch with `p` records
//! per slot owns records `s * p .. (s + 1) * p` of the save area, and its
//! `n`-th record (counting from 0) is record `s * p + n`, at word
//! `index * record_words` of the area.
//!
//! The formula is written once, in [`index`] and [`address`], over an
//! [`Arith`]: the host evaluates it on numbers ([`Host`]); each code
//! generator spells the same operations in its own instructions (a
//! Cranelift `imul` and `iadd`, a PTX `mad.lo`), so every executor finds a
//! record where every other one put it.

/// The arithmetic the record formula needs, spelled by each executor.
pub trait Arith {
    /// A value: a number on the host, a register or SSA value in code.
    type V;
    /// `a * b`.
    fn mul(&mut self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, where `c` is made by `c(self)` (code generators emit
    /// what makes `c` where their instruction order needs it).
    fn mul_add(&mut self, a: Self::V, b: Self::V, c: impl FnOnce(&mut Self) -> Self::V) -> Self::V;
    /// `a * k + c`, for a constant `k`.
    fn mul_imm_add(&mut self, a: Self::V, k: i64, c: Self::V) -> Self::V;
}

/// The index of slot `slot`'s record `n` (made by `n(a)`), with
/// `per_slot` records per slot.
pub fn index<A: Arith>(
    a: &mut A,
    slot: A::V,
    per_slot: A::V,
    n: impl FnOnce(&mut A) -> A::V,
) -> A::V {
    a.mul_add(slot, per_slot, n)
}

/// The index of slot `slot`'s first record.
pub fn first<A: Arith>(a: &mut A, slot: A::V, per_slot: A::V) -> A::V {
    a.mul(slot, per_slot)
}

/// The byte address of record `index` in a save area at `area` of
/// `record_words` words per record.
pub fn address<A: Arith>(a: &mut A, area: A::V, record_words: A::V, index: A::V) -> A::V {
    let words = a.mul(index, record_words);
    a.mul_imm_add(words, 8, area)
}

/// The formula on the host: numbers (`usize`, wrapping as the device's
/// registers do).
#[derive(Clone, Copy, Debug, Default)]
pub struct Host;

impl Arith for Host {
    type V = usize;
    fn mul(&mut self, a: usize, b: usize) -> usize {
        a.wrapping_mul(b)
    }
    fn mul_add(&mut self, a: usize, b: usize, c: impl FnOnce(&mut Self) -> usize) -> usize {
        a.wrapping_mul(b).wrapping_add(c(self))
    }
    fn mul_imm_add(&mut self, a: usize, k: i64, c: usize) -> usize {
        a.wrapping_mul(k as usize).wrapping_add(c)
    }
}

/// The index of slot `slot`'s record `n` on the host.
pub fn host_index(slot: usize, per_slot: usize, n: usize) -> usize {
    index(&mut Host, slot, per_slot, |_| n)
}

/// The records slot `slot` owns, with `per_slot` records per slot.
pub fn slot_records(slot: usize, per_slot: usize) -> std::ops::Range<usize> {
    let start = first(&mut Host, slot, per_slot);
    start..start + per_slot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_owns_its_own_records() {
        let per = 3;
        for slot in 0..5 {
            let own = slot_records(slot, per);
            for n in 0..per {
                assert!(own.contains(&host_index(slot, per, n)));
            }
            assert_eq!(own.end, slot_records(slot + 1, per).start);
        }
        assert_eq!(address(&mut Host, 1000, 4, 13), 1000 + 13 * 4 * 8);
    }
}
