//! The devices a launch may run on ([`Devices`]), and running a kernel on
//! one of them, or learning why it cannot run there ([`try_on`]): what
//! one launch (`launch.rs`) and a launch split over devices (`split.rs`)
//! both do.

use crate::adaptive::Plan;
use crate::cpu::CpuDevice;
use crate::cuda::Gpu;
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::executor::{Executor, Unsupported};
use crate::report::LaunchReport;
use std::ops::Range;

/// The devices a launch may run on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Devices<'a> {
    pub(crate) cpu: &'a CpuDevice,
    /// The GPUs (none unless the device is CUDA).
    pub(crate) gpus: &'a [Gpu],
    /// The launch was pinned to one GPU ([`crate::Runtime::on_gpu`]): it
    /// is not split.
    pub(crate) pinned: bool,
}

/// Why a compiled device cannot run this launch whatever the kernel:
/// profiling needs the interpreter, and the compiled slot loops claim
/// chunks with an atomic add that every slot may push up to a chunk past
/// the end, which must stay far from overflowing.
pub(crate) fn compiled_devices_refuse(env: &LaunchEnv, range: &Range<i64>) -> Option<String> {
    if env.settings.profile {
        Some("profiling is on".to_string())
    } else if range.end > i64::MAX - (1 << 32) {
        Some("the range ends too close to i64::MAX for the device cursor".to_string())
    } else {
        None
    }
}

/// Run `call` on `device`, or say why it cannot run there.
pub(crate) fn try_on(
    device: &dyn Executor,
    env: &LaunchEnv,
    call: KernelCall<'_>,
    plan: &Plan,
    range: &Range<i64>,
    started: Started,
) -> Result<Result<LaunchReport, OffloadError>, Unsupported> {
    if let Some(why) = compiled_devices_refuse(env, range) {
        return Err(Unsupported(why));
    }
    device.launch(env, call, plan, range.clone(), started)
}
