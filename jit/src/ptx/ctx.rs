//! The device's launch context ([`DeviceCtx`]) and its layout.

/// The launch context of a kernel on the device, `#[repr(C)]`: the CPU
/// [`crate::LaunchCtx`]'s fields where they mean the same, with device
/// addresses as `u64`, and what a grid needs besides (TLABs by group,
/// the device eden, the slot count, per-slot exit codes, counters).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCtx {
    /// The heap image's first byte; references are word offsets from here.
    pub heap_base: u64,
    /// The next unclaimed workitem (`i64`).
    pub cursor: u64,
    /// One past the last workitem.
    pub end: i64,
    /// Workitems per claim.
    pub chunk: i64,
    /// The control word (`u32` in device memory; the host copies requests into it).
    pub control: u64,
    /// The save area: `records_per_slot` records of `record_words` words per slot.
    pub save_area: u64,
    /// Words per save record.
    pub record_words: u64,
    /// Per slot, two `i64`: the unstarted `[start, end)` of its chunk.
    pub never_ran: u64,
    /// The kernel's captures, one raw 64-bit slot each.
    pub captures: u64,
    /// Save records per slot, at least 1.
    pub records_per_slot: u64,
    /// The TLABs: an array of `offload_tlab::SharedTlab`-layout records
    /// (state, generation, refills; 24 bytes each).
    pub tlabs: u64,
    /// Slots per TLAB (slot `s` uses TLAB `s / tlab_group`); 0: no TLABs,
    /// every object comes straight from eden.
    pub tlab_group: u64,
    /// The device eden: `{ top, limit }`, heap words.
    pub eden: u64,
    /// Objects of more words than this come straight from eden.
    pub large_words: u64,
    /// Slots (threads) of the launch; threads beyond return at once.
    pub slots: u64,
    /// Words a refill carves (at least the object).
    pub tlab_words: u64,
    /// Per slot, the `EXIT_*` code of its last run (`u32`).
    pub exits: u64,
    /// Counters (`u64`), summed over a launch's runs: `[deopts, refills,
    /// refill waits, eden failures, slots that exited with work left
    /// (stopped, records full, or resuming), workitems completed]`.
    pub stats: u64,
    /// Per slot, the state of injected safepoints when it last polled
    /// (`u64`, 0 before its first poll): kept across relaunches so that the
    /// stream goes on (see [`crate::SafepointInjection`]).
    pub inject: u64,
    /// The heap's dirty map: a byte per `offload_tlab::resident` chunk of
    /// the heap image (which starts at a chunk boundary), set to 1 by every store and atomic of the kernel
    /// into that chunk (the objects it allocates lie in the device eden,
    /// which the host counts as written whole). The host zeroes the map
    /// before each run and reads back the part below the device eden's
    /// top.
    pub dirty: u64,
    /// A `u32` counter: slots waiting at a poll for
    /// [`crate::ctx::CONTROL_WAIT`] to clear, plus slots that have exited.
    /// The host zeroes it before each run; once it equals `slots`, every
    /// slot is either waiting (its writes fenced) or gone.
    pub parked: u64,
}

/// Byte offsets of the [`DeviceCtx`] fields.
pub mod offsets {
    #![allow(missing_docs)]
    pub const HEAP_BASE: u32 = 0;
    pub const CURSOR: u32 = 8;
    pub const END: u32 = 16;
    pub const CHUNK: u32 = 24;
    pub const CONTROL: u32 = 32;
    pub const SAVE_AREA: u32 = 40;
    pub const RECORD_WORDS: u32 = 48;
    pub const NEVER_RAN: u32 = 56;
    pub const CAPTURES: u32 = 64;
    pub const RECORDS_PER_SLOT: u32 = 72;
    pub const TLABS: u32 = 80;
    pub const TLAB_GROUP: u32 = 88;
    pub const EDEN: u32 = 96;
    pub const LARGE_WORDS: u32 = 104;
    pub const SLOTS: u32 = 112;
    pub const TLAB_WORDS: u32 = 120;
    pub const EXITS: u32 = 128;
    pub const STATS: u32 = 136;
    pub const INJECT: u32 = 144;
    pub const DIRTY: u32 = 152;
    pub const PARKED: u32 = 160;
}

/// Bytes of one device TLAB record (state, generation, refills).
pub const DEVICE_TLAB_BYTES: u64 = 24;

#[cfg(test)]
mod tests {
    use super::{DeviceCtx, offsets};
    use std::mem::offset_of;

    #[test]
    fn the_device_context_offsets_match_its_fields() {
        let fields = [
            (offset_of!(DeviceCtx, heap_base), offsets::HEAP_BASE),
            (offset_of!(DeviceCtx, cursor), offsets::CURSOR),
            (offset_of!(DeviceCtx, end), offsets::END),
            (offset_of!(DeviceCtx, chunk), offsets::CHUNK),
            (offset_of!(DeviceCtx, control), offsets::CONTROL),
            (offset_of!(DeviceCtx, save_area), offsets::SAVE_AREA),
            (offset_of!(DeviceCtx, record_words), offsets::RECORD_WORDS),
            (offset_of!(DeviceCtx, never_ran), offsets::NEVER_RAN),
            (offset_of!(DeviceCtx, captures), offsets::CAPTURES),
            (
                offset_of!(DeviceCtx, records_per_slot),
                offsets::RECORDS_PER_SLOT,
            ),
            (offset_of!(DeviceCtx, tlabs), offsets::TLABS),
            (offset_of!(DeviceCtx, tlab_group), offsets::TLAB_GROUP),
            (offset_of!(DeviceCtx, eden), offsets::EDEN),
            (offset_of!(DeviceCtx, large_words), offsets::LARGE_WORDS),
            (offset_of!(DeviceCtx, slots), offsets::SLOTS),
            (offset_of!(DeviceCtx, tlab_words), offsets::TLAB_WORDS),
            (offset_of!(DeviceCtx, exits), offsets::EXITS),
            (offset_of!(DeviceCtx, stats), offsets::STATS),
            (offset_of!(DeviceCtx, inject), offsets::INJECT),
            (offset_of!(DeviceCtx, dirty), offsets::DIRTY),
            (offset_of!(DeviceCtx, parked), offsets::PARKED),
        ];
        for (i, (at, off)) in fields.iter().enumerate() {
            assert_eq!(*at as u32, *off, "field {i}");
        }
        assert_eq!(std::mem::size_of::<DeviceCtx>(), 8 * fields.len());
    }
}
