//! A slot's exit codes: what a compiled slot loop returns (CPU) or leaves
//! in its exit word (GPU, [`crate::gpu::DeviceCtx::exits`]).
//!
//! The codes other than [`DONE`] are numbers no kernel is likely to use in
//! its hot code: Cranelift merges equal constants, and a code equal to one
//! the loop uses (the safepoint bit, a loop step) would be materialized in
//! the loop and held in a register for the exit that returns it.

/// The range is exhausted.
pub const DONE: u32 = 0;
/// The slot saw the control word set and stopped between workitems; its
/// unstarted rest is in its never-ran words.
pub const STOPPED: u32 = 0x0E51;
/// Its records are full, or it deoptimized at a safepoint; the records are
/// in the save area and its unstarted rest in its never-ran words.
pub const DEOPT: u32 = 0x0E52;
/// It wrote a save record and has room for more; its unstarted rest is in
/// `never_ran` and its record count in `records`. The host enters it again
/// at once (and replays nothing yet). Deopt exits leave the slot function
/// rather than jump back into its loop, so that Cranelift keeps what only
/// they use out of the loop's registers. (CPU only.)
pub const RECORDED: u32 = 0x0E53;
/// It resumed the save record it was entered with
/// ([`crate::cpu::SlotWords::reenter`]) and ran that workitem to its end;
/// its `never_ran` is empty (the host keeps the slot's unstarted rest).
/// (CPU only.)
pub const RESUMED: u32 = 0x0E54;
/// It was entered to resume a record whose site has no landing in this
/// code (a corrupt record, or a host bug); nothing ran.
pub const NO_LANDING: u32 = 0x0E55;
/// Its values buffer ([`crate::cpu::LaunchCtx::values`]) is full, or it
/// claimed a chunk that does not continue the buffer's run of workitems
/// (CPU); its leaves ([`crate::gpu::DeviceCtx::leaves`]) are full (GPU).
/// Its unstarted rest is in `never_ran`; the host takes the values and
/// enters it again.
pub const VALUES: u32 = 0x0E56;
