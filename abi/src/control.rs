//! The bits of the control word: how the host asks running slots to stop.
//! Compiled code on every device polls the word (at kernel entry, before
//! each workitem and at loop back-edges); the host's safepoint and
//! interrupt machinery sets it.

/// The host requests a safepoint: slots stop before their next workitem
/// and deoptimize at their next back-edge poll. (A deopt does not stop the
/// other slots: each slot has its own records, see
/// [`crate::cpu::LaunchCtx::records_per_slot`].)
pub const SAFEPOINT: u32 = 2;

/// The GPU's slots only: the host requests a safepoint that moves no
/// object; slots wait at their next poll, with their frames in registers,
/// until the bit clears (counted in the launch's parked word,
/// [`crate::gpu::DeviceCtx::parked`]).
pub const WAIT: u32 = 4;
