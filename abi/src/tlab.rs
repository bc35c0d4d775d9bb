//! A shared TLAB's words, as compiled code and the runtime's allocator see
//! them (the protocol is `offload_heap::tlab`'s): its state, one 64-bit
//! word `end << 32 | top` in heap words, so that one atomic add returns a
//! consistent snapshot of both; its generation, bumped by each refill, with
//! [`FAILED`] set when eden was exhausted during one; and its refill count.

/// The words of one shared TLAB, `#[repr(C)]`: the GPU's TLABs are an
/// array of these; the CPU's `offload_heap::SharedTlab` starts with the
/// same words (checked where it is defined).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlabWords {
    /// `end << 32 | top`, in heap words ([`pack`]).
    pub state: u64,
    /// Bumped by each refill; [`FAILED`] set when eden was exhausted.
    pub generation: u64,
    /// Refills so far.
    pub refills: u64,
}

/// Byte offset of the state word.
pub const STATE_OFFSET: i32 = std::mem::offset_of!(TlabWords, state) as i32;
/// Byte offset of the generation word.
pub const GENERATION_OFFSET: i32 = std::mem::offset_of!(TlabWords, generation) as i32;
/// Byte offset of the refill count.
pub const REFILLS_OFFSET: i32 = std::mem::offset_of!(TlabWords, refills) as i32;

/// The bit of the generation set when eden was exhausted during a refill:
/// the sign bit, so code may test it as `generation < 0`.
pub const FAILED_BIT: u32 = 63;
/// The generation's [`FAILED_BIT`] as a mask.
pub const FAILED: u64 = 1 << FAILED_BIT;

/// Bits of the state word's `top` (its low half); `end` is the high half.
pub const END_SHIFT: u32 = 32;

/// A state word from `top` and `end`.
pub fn pack(top: u32, end: u32) -> u64 {
    u64::from(end) << END_SHIFT | u64::from(top)
}

/// `(top, end)` of a state word.
pub fn unpack(s: u64) -> (u32, u32) {
    (s as u32, (s >> END_SHIFT) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_is_the_sign_bit_and_states_round_trip() {
        assert!((FAILED as i64) < 0);
        assert_eq!(FAILED.count_ones(), 1);
        assert_eq!(unpack(pack(u32::MAX - 1, 7)), (u32::MAX - 1, 7));
        assert_eq!(
            (STATE_OFFSET, GENERATION_OFFSET, REFILLS_OFFSET),
            (0, 8, 16)
        );
    }
}
