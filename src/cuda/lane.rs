//! Lanes: what one launch in flight on a GPU has of its own — a stream
//! its rounds are issued on, and the control word its kernel polls.
//!
//! Launches that share the GPU (`share.rs`) run at once, each on its own
//! lane: a kernel on one stream does not wait for another's, and each
//! launch passes safepoints to its slots on its own terms (the fairness
//! of `super`'s module docs is per launch: one word shared by two
//! launches would stop both whenever either honoured a request). Lane 0's
//! stream is the heap image's (`resident.rs`), where image growth, page
//! tables and fillers are issued; a launch on another lane that used the
//! GPU alone settles that stream before its kernel starts.
//!
//! The GPU keeps its lanes between launches (a stream and a word each,
//! made on first need): a launch takes a free one, lane 0 first, and gives
//! it back when it ends.

use super::raw::DeviceMem;
use super::resident::DeviceHeap;
use crate::error::OffloadError;
use cudarc::driver::{CudaContext, CudaStream, sys};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A stream and a control word.
pub(crate) struct Lane {
    /// Which lane this is (0: the heap image's stream).
    pub(super) number: usize,
    pub(super) stream: Arc<CudaStream>,
    /// The control word this lane's kernels poll, in device memory.
    control: DeviceMem,
    /// The value last written to it.
    control_last: AtomicU32,
}

impl Lane {
    /// A lane on `stream`, its word zeroed.
    fn new(
        number: usize,
        ctx: &Arc<CudaContext>,
        stream: Arc<CudaStream>,
        heap: &DeviceHeap,
    ) -> Result<Lane, OffloadError> {
        let control = DeviceMem::new(ctx, 4).map_err(super::cuda_err("control word"))?;
        heap.write_raw(control.at(), &[0u32])?;
        Ok(Lane {
            number,
            stream,
            control,
            control_last: AtomicU32::new(0),
        })
    }

    /// The raw stream.
    pub(super) fn cu_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// The control word's device address (`DeviceCtx::control`).
    pub(super) fn control_at(&self) -> u64 {
        self.control.at()
    }

    /// Set the control word the running kernel polls (a copy on the heap's
    /// copy stream, which runs beside the kernel; skipped when the word
    /// already holds `v`).
    pub(super) fn set_control(&self, heap: &DeviceHeap, v: u32) -> Result<(), OffloadError> {
        if self.control_last.swap(v, Ordering::AcqRel) == v {
            return Ok(());
        }
        heap.write_raw(self.control.at(), &[v])
    }

    /// The control word as the device sees it (one read on the copy
    /// stream).
    pub(super) fn control_word(&self, heap: &DeviceHeap) -> Result<u32, OffloadError> {
        let mut w = [0u32];
        heap.read_raw(self.control.at(), &mut w)?;
        Ok(w[0])
    }
}

/// The GPU's lanes not in use, and how many it has made.
#[derive(Default)]
pub(super) struct Lanes {
    free: Mutex<(Vec<Lane>, usize)>,
}

impl Lanes {
    /// Lane 0, on `stream` (the heap image's), to start the pool with.
    pub(super) fn first(
        ctx: &Arc<CudaContext>,
        stream: Arc<CudaStream>,
        heap: &DeviceHeap,
    ) -> Result<Lanes, OffloadError> {
        let lane = Lane::new(0, ctx, stream, heap)?;
        Ok(Lanes {
            free: Mutex::new((vec![lane], 1)),
        })
    }

    /// A free lane (the lowest-numbered), or a new one.
    pub(super) fn take(
        &self,
        ctx: &Arc<CudaContext>,
        heap: &DeviceHeap,
    ) -> Result<Lane, OffloadError> {
        let number = {
            let mut g = self.free.lock().unwrap_or_else(PoisonError::into_inner);
            let (free, made) = &mut *g;
            if let Some(i) = (0..free.len()).min_by_key(|&i| free[i].number) {
                return Ok(free.swap_remove(i));
            }
            *made += 1;
            *made - 1
        };
        let stream = ctx.new_stream().map_err(super::cuda_err("launch stream"))?;
        Lane::new(number, ctx, stream, heap)
    }

    /// Give `lane` back for later launches.
    pub(super) fn put(&self, lane: Lane) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .0
            .push(lane);
    }
}
