//! The GPU device's side of the contract: the launch context of a kernel
//! on the device ([`DeviceCtx`]), its field offsets for the PTX emitter
//! ([`offsets`], derived from the type), and the size of a device TLAB
//! ([`TLAB_BYTES`]).

use crate::tlab::TlabWords;

/// Defines [`DeviceCtx`] and [`DeviceCtx::to_words`] from one list of
/// fields, so that the words the host uploads are the fields in order.
macro_rules! device_ctx {
    ($(#[$doc:meta])* $vis:vis struct $name:ident { $($(#[$fdoc:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        $vis struct $name {
            $($(#[$fdoc])* pub $field: $ty,)*
        }

        impl $name {
            /// The context as the words the host uploads: every field is
            /// one 64-bit word, in declaration order.
            pub fn to_words(self) -> [u64; DEVICE_CTX_WORDS] {
                // Each field is a `u64` or an `i64` (its bits).
                [$(self.$field as u64,)*]
            }
        }
    };
}

device_ctx! {
    /// The launch context of a kernel on the device, `#[repr(C)]`, passed
    /// by value as the kernel's first parameter (`p_ctx`, a byte array the
    /// kernel reads with `ld.param`, so that its fields cost no register
    /// and no memory traffic; the captures' raw words are the second,
    /// `p_caps`, see [`MAX_CAPTURES`]): the
    /// CPU [`crate::cpu::LaunchCtx`]'s fields where they mean the same,
    /// with device addresses as `u64`, and what a grid needs besides
    /// (TLABs by group, the device eden, the slot count, per-slot exit
    /// codes, counters). Every field is one 64-bit word.
    pub struct DeviceCtx {
        /// The heap image's first byte; references are word offsets from here.
        heap_base: u64,
        /// The range's first workitem.
        start: i64,
        /// One past the last workitem.
        end: i64,
        /// The control word (`u32` in device memory; the host copies requests into it).
        control: u64,
        /// The save area: `records_per_slot` records of `record_words` words per slot.
        save_area: u64,
        /// Words per save record.
        record_words: u64,
        /// Per slot, a [`NeverRan`]: its unstarted rest. The range is
        /// partitioned statically, grid-stride: slot `s` runs workitems
        /// `start + s`, `start + s + slots`, … below `end`, so a rest is
        /// the workitems `lo`, `lo + slots`, … below `hi`. `(0, 0)` (the
        /// zeroed buffer) means the slot has not started its part. A slot
        /// that stops or deoptimizes stores its rest ([`NEVER_RAN_NONE`]
        /// when nothing is left); one that finishes stores nothing (its exit
        /// code says so: the host writes [`NEVER_RAN_NONE`] for it before a
        /// relaunch).
        never_ran: u64,
        /// Save records per slot, at least 1.
        records_per_slot: u64,
        /// The TLABs: an array of [`TlabWords`] (state, generation, refills;
        /// [`TLAB_BYTES`] apart).
        tlabs: u64,
        /// Slots per TLAB (slot `s` uses TLAB `s / tlab_group`); 0: no TLABs,
        /// every object comes straight from eden.
        tlab_group: u64,
        /// The device eden: two `u64` heap words, at [`EDEN_TOP`] and
        /// [`EDEN_LIMIT`].
        eden: u64,
        /// Objects of more words than this come straight from eden.
        large_words: u64,
        /// Slots (threads) of the launch; threads beyond return at once.
        slots: u64,
        /// Words a refill carves (at least the object).
        tlab_words: u64,
        /// Per slot, how its last run ended: a byte, [`exit_byte`] of the
        /// [`crate::exit`] code. The host zeroes the bytes before each run:
        /// 0 is a slot still running. A slot that exits stores its byte
        /// with release semantics at system scope (its writes are visible
        /// before the byte is). A slot counts no workitems: the host knows
        /// what each run was given (the slots' parts, the records it
        /// handed back) and reads what is left (rests, records), so the
        /// difference is what the slots completed.
        exits: u64,
        /// Counters (`u64`) of one run, at the indices of [`counter`];
        /// the host zeroes them before each run and sums them over a
        /// launch's runs.
        stats: u64,
        /// Per slot, the state of injected safepoints when it last polled
        /// (`u64`, 0 before its first poll): kept across relaunches so that the
        /// stream goes on (see `offload_jit::SafepointInjection`).
        inject: u64,
        /// The heap's dirty map, less the heap image's first chunk number:
        /// the map holds a byte per `offload_heap::resident` chunk of the
        /// image (which starts at a chunk boundary), and the byte of the
        /// chunk holding address `a` is at `dirty + (a >> CHUNK_SHIFT)`
        /// (wrapping). The kernel sets it to 1 with every store and atomic
        /// into that chunk (the objects it allocates lie in the device eden,
        /// which the host counts as written whole). The host zeroes the map
        /// before each run and reads back the part below the device eden's
        /// end.
        dirty: u64,
        /// A `u32` counter: slots waiting at a poll for
        /// [`control::WAIT`](crate::control::WAIT) to clear. The host zeroes
        /// it before each run; once it plus the slots that have exited
        /// ([`DeviceCtx::exits`]) equals `slots`, every slot is either
        /// waiting (its writes fenced) or gone.
        parked: u64,
        /// 1 on a launch's first run: no slot has a record in the save area
        /// or a rest in [`DeviceCtx::never_ran`] (all `(0, 0)`), so slots
        /// start their parts without reading either; 0 on a relaunch.
        fresh: u64,
        /// The slot thread 0 runs, below `slots`: thread `t` runs slot
        /// `(t + rotate) mod slots`. The host picks it so that the 32
        /// consecutive workitems a warp runs together start on a 32-byte
        /// sector of the array the kernel streams through (its elements
        /// start 8 bytes past a header): coalescing as a CUDA C kernel's
        /// `cudaMalloc`ed arrays have it. Nothing else depends on it: a
        /// slot's part is `start + slot`, `start + slot + slots`, ….
        rotate: u64,
        /// The heap's page table on the device: a `u32` tag per page of
        /// the image ([`crate::pages`]), from which the kernel reads an
        /// object's class without its header.
        pages: u64,
        /// For a reducing kernel ([`crate::reduce`]): per tile of
        /// [`TILE`] positions of the range (tile `t`: positions
        /// `[t * TILE, (t + 1) * TILE)`), the raw bits (`u64`) of the
        /// tile's node of the combine tree, written by the warp whose 32
        /// lanes ran the tile's workitems together; 0 otherwise.
        tiles: u64,
        /// Per tile, a byte: 1 once [`DeviceCtx::tiles`] holds its node
        /// (the host zeroes them at a launch's first run); 0 otherwise.
        tile_flags: u64,
        /// For a reducing kernel: per slot, [`LEAVES_PER_SLOT`] leaves of
        /// [`LEAF_BYTES`] each — the position and raw value of a workitem
        /// whose value did not go into a tile's node; 0 otherwise.
        leaves: u64,
        /// Per slot, a `u32`: the leaves its last run wrote (stored at
        /// its exit); 0 for a kernel that does not reduce.
        leaf_counts: u64,
        /// For a reducing kernel, how its values combine: [`crate::reduce::Combine::code`].
        combine: u64,
        /// For a kernel with parameters a launch may sum into
        /// (`offload_ir::summed`): `copy_rows` rows, each holding per such
        /// parameter (in parameter order) its raw word (`u64`) then its
        /// element 0's address (`u64`); the threads of block `b` take
        /// those parameters from row `b % copy_rows` instead of the
        /// kernel's parameters (a summed array's row holds a copy of it,
        /// another parameter's its capture). 0 for a kernel without such
        /// parameters.
        copies: u64,
        /// Rows at [`DeviceCtx::copies`], at least 1 when it is not 0.
        copy_rows: u64,
    }
}

/// Positions in a tile of a reduction ([`DeviceCtx::tiles`]): a warp's
/// lanes; its node is the tree's node of level [`TILE_LEVEL`].
pub const TILE: u64 = 32;
/// The level of a tile's node in the combine tree (`TILE = 2^TILE_LEVEL`).
pub const TILE_LEVEL: u32 = 5;
/// Leaves a slot holds ([`DeviceCtx::leaves`]) before it exits with
/// [`crate::exit::VALUES`] for the host to take them.
pub const LEAVES_PER_SLOT: u64 = 32;
/// Bytes of one leaf: the workitem's position (`u64`), then its value's raw
/// bits (`u64`).
pub const LEAF_BYTES: u64 = 16;

/// The word of the device eden ([`DeviceCtx::eden`]) holding its top: the
/// next word a carve takes (past the limit once a carve failed).
pub const EDEN_TOP: usize = 0;
/// The word of the device eden holding its limit (one past its last word).
pub const EDEN_LIMIT: usize = 1;
/// Words of the device eden.
pub const EDEN_WORDS: usize = 2;

/// A run's counters ([`DeviceCtx::stats`]): word indices, each a `u64`.
/// None is touched by a run in which no slot deoptimizes, stops or
/// allocates.
pub mod counter {
    /// Save records written.
    pub const DEOPTS: usize = 0;
    /// TLAB refills from the device eden.
    pub const REFILLS: usize = 1;
    /// Allocations that waited for another allocator's refill.
    pub const REFILL_WAITS: usize = 2;
    /// Carves that found the device eden exhausted.
    pub const EDEN_FAILURES: usize = 3;
    /// Slots that exited with work left (stopped, records full, or
    /// resuming).
    pub const SLOTS_STOPPED: usize = 4;
    /// Slots of a reducing kernel that left leaves
    /// ([`super::DeviceCtx::leaves`]).
    pub const LEAF_SLOTS: usize = 5;
    /// Counters in all.
    pub const COUNT: usize = 6;

    /// The byte offset of counter `c` from the counters' start.
    pub const fn byte(c: usize) -> usize {
        c * 8
    }
}

/// One slot's unstarted rest in [`DeviceCtx::never_ran`]: the workitems
/// `lo`, `lo + slots`, … below `hi`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NeverRan {
    /// The first unstarted workitem.
    pub lo: i64,
    /// One past the last.
    pub hi: i64,
}

/// What a slot with nothing left stores as its rest (`lo > hi`, and not
/// the `(0, 0)` of a slot that has not started).
pub const NEVER_RAN_NONE: (i64, i64) = (1, 0);

/// Bytes from one slot's [`NeverRan`] to the next.
pub const NEVER_RAN_BYTES: u64 = size_of::<NeverRan>() as u64;
/// `NeverRan::lo`.
pub const NEVER_RAN_LO: i32 = std::mem::offset_of!(NeverRan, lo) as i32;
/// `NeverRan::hi`.
pub const NEVER_RAN_HI: i32 = std::mem::offset_of!(NeverRan, hi) as i32;
/// Set in every exit byte a slot stores ([`DeviceCtx::exits`]): the
/// codes ([`crate::exit::DONE`] is 0) are then told from a slot still
/// running.
pub const EXITED: u8 = 0x80;

/// The exit codes a GPU slot leaves, each told by its low four bits.
const GPU_EXITS: [u32; 5] = [
    crate::exit::DONE,
    crate::exit::STOPPED,
    crate::exit::DEOPT,
    crate::exit::NO_LANDING,
    crate::exit::VALUES,
];

/// The byte a GPU slot stores for exit code `code` (one of [`crate::exit`]'s
/// GPU codes: `DONE`, `STOPPED`, `DEOPT`, `NO_LANDING`, `VALUES`): [`EXITED`] with the
/// code's low four bits. A byte per slot keeps the exits of a warp in one
/// 32-byte sector.
pub const fn exit_byte(code: u32) -> u8 {
    EXITED | (code & 0x0F) as u8
}

/// The exit code of an exit byte, `None` for a slot still running (0) or a
/// byte no GPU slot stores.
pub fn exit_code(byte: u8) -> Option<u32> {
    GPU_EXITS.into_iter().find(|&c| exit_byte(c) == byte)
}

/// Bytes from one slot's exit byte ([`DeviceCtx::exits`]) to the next.
pub const EXIT_BYTES: u64 = size_of::<u8>() as u64;
/// Bytes from one slot's injection state ([`DeviceCtx::inject`], a `u64`)
/// to the next.
pub const INJECT_BYTES: u64 = size_of::<u64>() as u64;

/// Words in a [`DeviceCtx`].
pub const DEVICE_CTX_WORDS: usize = size_of::<DeviceCtx>() / 8;

/// Bytes of kernel parameters every GPU the device supports takes (4 KiB:
/// sm_70 and later, any driver).
pub const PARAM_BYTES: usize = 4096;

/// The most captures a kernel may take on the GPU: a kernel's parameters
/// are its [`DeviceCtx`] (`p_ctx`), its captures' raw 64-bit words
/// (`p_caps`) and, per capture, the address of its array's element 0
/// ([`elem0`]; `p_elems`), passed by value at launch, and must fit
/// [`PARAM_BYTES`].
pub const MAX_CAPTURES: usize = (PARAM_BYTES / 8 - DEVICE_CTX_WORDS) / 2;

/// What `p_elems` holds for a capture whose raw word is `raw`, the heap
/// image starting at `heap_base`: the address of element 0 if it is an
/// array (a reference is a word offset; the elements follow an 8-byte
/// header), the same arithmetic on the word otherwise (unused).
pub fn elem0(heap_base: u64, raw: u64) -> u64 {
    heap_base.wrapping_add(8 * (raw & 0xFFFF_FFFF) + 8)
}

/// Bytes of one device TLAB record ([`TlabWords`]: state, generation,
/// refills), packed one after the other.
pub const TLAB_BYTES: u64 = size_of::<TlabWords>() as u64;

/// Byte offsets of the [`DeviceCtx`] fields (derived from the type).
pub mod offsets {
    #![allow(missing_docs)]
    use super::DeviceCtx;
    use std::mem::offset_of;

    pub const HEAP_BASE: u32 = offset_of!(DeviceCtx, heap_base) as u32;
    pub const START: u32 = offset_of!(DeviceCtx, start) as u32;
    pub const END: u32 = offset_of!(DeviceCtx, end) as u32;
    pub const CONTROL: u32 = offset_of!(DeviceCtx, control) as u32;
    pub const SAVE_AREA: u32 = offset_of!(DeviceCtx, save_area) as u32;
    pub const RECORD_WORDS: u32 = offset_of!(DeviceCtx, record_words) as u32;
    pub const NEVER_RAN: u32 = offset_of!(DeviceCtx, never_ran) as u32;
    pub const RECORDS_PER_SLOT: u32 = offset_of!(DeviceCtx, records_per_slot) as u32;
    pub const TLABS: u32 = offset_of!(DeviceCtx, tlabs) as u32;
    pub const TLAB_GROUP: u32 = offset_of!(DeviceCtx, tlab_group) as u32;
    pub const EDEN: u32 = offset_of!(DeviceCtx, eden) as u32;
    pub const LARGE_WORDS: u32 = offset_of!(DeviceCtx, large_words) as u32;
    pub const SLOTS: u32 = offset_of!(DeviceCtx, slots) as u32;
    pub const TLAB_WORDS: u32 = offset_of!(DeviceCtx, tlab_words) as u32;
    pub const EXITS: u32 = offset_of!(DeviceCtx, exits) as u32;
    pub const STATS: u32 = offset_of!(DeviceCtx, stats) as u32;
    pub const INJECT: u32 = offset_of!(DeviceCtx, inject) as u32;
    pub const DIRTY: u32 = offset_of!(DeviceCtx, dirty) as u32;
    pub const PARKED: u32 = offset_of!(DeviceCtx, parked) as u32;
    pub const FRESH: u32 = offset_of!(DeviceCtx, fresh) as u32;
    pub const ROTATE: u32 = offset_of!(DeviceCtx, rotate) as u32;
    /// [`DeviceCtx::pages`].
    pub const PAGES: u32 = offset_of!(DeviceCtx, pages) as u32;
    /// [`DeviceCtx::tiles`].
    pub const TILES: u32 = offset_of!(DeviceCtx, tiles) as u32;
    /// [`DeviceCtx::tile_flags`].
    pub const TILE_FLAGS: u32 = offset_of!(DeviceCtx, tile_flags) as u32;
    /// [`DeviceCtx::leaves`].
    pub const LEAVES: u32 = offset_of!(DeviceCtx, leaves) as u32;
    /// [`DeviceCtx::leaf_counts`].
    pub const LEAF_COUNTS: u32 = offset_of!(DeviceCtx, leaf_counts) as u32;
    /// [`DeviceCtx::combine`].
    pub const COMBINE: u32 = offset_of!(DeviceCtx, combine) as u32;
    /// [`DeviceCtx::copies`].
    pub const COPIES: u32 = offset_of!(DeviceCtx, copies) as u32;
    /// [`DeviceCtx::copy_rows`].
    pub const COPY_ROWS: u32 = offset_of!(DeviceCtx, copy_rows) as u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_words_are_the_fields_in_order_at_their_offsets() {
        // Distinct values per field: each word must land at its offset.
        let ctx = DeviceCtx {
            heap_base: 1,
            start: 2,
            end: -3,
            control: 5,
            save_area: 6,
            record_words: 7,
            never_ran: 8,
            records_per_slot: 10,
            tlabs: 11,
            tlab_group: 12,
            eden: 13,
            large_words: 14,
            slots: 15,
            tlab_words: 16,
            exits: 17,
            stats: 18,
            inject: 19,
            dirty: 20,
            parked: 21,
            fresh: 23,
            rotate: 24,
            pages: 25,
            tiles: 26,
            tile_flags: 27,
            leaves: 28,
            leaf_counts: 29,
            combine: 30,
            copies: 31,
            copy_rows: 32,
        };
        let words = ctx.to_words();
        let at = |off: u32| words[off as usize / 8];
        assert_eq!(at(offsets::HEAP_BASE), 1);
        assert_eq!(at(offsets::END), (-3i64) as u64);
        assert_eq!(at(offsets::RECORDS_PER_SLOT), 10);
        assert_eq!(at(offsets::TLABS), 11);
        assert_eq!(at(offsets::START), 2);
        assert_eq!(at(offsets::PARKED), 21);
        assert_eq!(at(offsets::FRESH), 23);
        assert_eq!(at(offsets::ROTATE), 24);
        assert_eq!(at(offsets::PAGES), 25);
        for c in GPU_EXITS {
            assert_eq!(exit_code(exit_byte(c)), Some(c));
        }
        assert_eq!(exit_code(0), None);
        assert_eq!(at(offsets::LEAF_COUNTS), 29);
        assert_eq!(at(offsets::COMBINE), 30);
        assert_eq!(at(offsets::COPY_ROWS), 32);
        assert_eq!(words.len(), 29);
        assert_eq!(1 << TILE_LEVEL, TILE);
        // Kernel parameters: the context and the captures fit 4 KiB.
        const { assert!(DEVICE_CTX_WORDS * 8 + MAX_CAPTURES * 16 <= PARAM_BYTES) };
        const { assert!(DEVICE_CTX_WORDS * 8 + (MAX_CAPTURES + 1) * 16 > PARAM_BYTES) };
        assert_eq!(TLAB_BYTES, 24);
        assert_eq!((NEVER_RAN_BYTES, NEVER_RAN_LO, NEVER_RAN_HI), (16, 0, 8));
        assert_eq!(EXIT_BYTES, 1);
        // What the generated PTX was built against.
        assert_eq!(offsets::PARKED, 144);
    }
}
