//! The narrow interface between a launch and a device: [`Executor`]. A
//! device gets the [`LaunchEnv`] (heap, workers, control word, settings,
//! allocator and save-area pool), the kernel ([`KernelCall`]) and the plan,
//! and returns the [`LaunchReport`] — or [`Unsupported`], when it cannot
//! run the kernel, and the launch falls back to the next device
//! (`launch.rs`).
//!
//! The three devices: the interpreter (`interp_device.rs`), compiled CPU
//! code (`cpu.rs`), a CUDA GPU (`cuda/`). Each replays its deopt records
//! and keeps their account through `replay.rs`, and builds its report from
//! [`LaunchReport::new`].

use crate::adaptive::Plan;
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::report::LaunchReport;
use std::ops::Range;

/// Why a device cannot run a kernel (the report's `fallback` note names
/// it).
#[derive(Debug)]
pub(crate) struct Unsupported(pub(crate) String);

/// A device that runs launches.
pub(crate) trait Executor {
    /// Run `call` over `range` as `plan` says: the launch's result, or why
    /// this device cannot run the kernel (nothing of the range ran).
    fn launch(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        plan: &Plan,
        range: Range<i64>,
        started: Started,
    ) -> Result<Result<LaunchReport, OffloadError>, Unsupported>;
}
