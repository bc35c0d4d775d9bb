//! One launch on the GPU: its steps of the launch protocol
//! (`protocol.rs`) — the slot count, the save area kept from launch to
//! launch and the buffers ([`GpuLaunch`]); the rounds are the grid's
//! (`grid.rs`), over the heap image that stays on the device
//! ([`super::resident`]).

use super::grid::{Grid, RECORDS_PER_SLOT, block_for};
use super::lane::Lane;
use super::raw::DeviceMem;
use super::{BLOCK, Gpu, Loaded, WARP, cuda_err};
use crate::adaptive::Plan;
use crate::device::Device;
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::protocol::{self, Code, Compiled, DeviceFacts, Launch, UnitOut};
use crate::report::LaunchReport;
use offload_abi::gpu::counter;
use offload_deopt::SaveArea;
use offload_heap::Allocator;
use std::ops::Range;
use std::sync::PoisonError;

/// Run `k` over `range`: one launch on the GPU.
pub(super) fn run(
    env: &LaunchEnv,
    gpu: &Gpu,
    k: &Loaded,
    range: Range<i64>,
    call: KernelCall<'_>,
    plan: &Plan,
    started: Started,
) -> Result<LaunchReport, OffloadError> {
    // The launch's stream and control word; each run holds the GPU,
    // shared or alone (`share.rs`), from its start to the next run's.
    let lane = gpu.lanes.take(&gpu.ctx, &gpu.resident)?;
    let held = Held {
        gpu,
        ticket: gpu.share.launch(),
        lane: Some(lane),
    };
    let dev = GpuLaunch {
        gpu,
        k,
        lane: held.lane.as_ref().expect("taken above"),
        ticket: held.ticket,
    };
    let code = Code {
        meta: &k.ptx.meta,
        landings: &k.ptx.resumes,
    };
    protocol::run(&dev, env, call, code, plan, range, started)
}

/// A launch's lane and hold on the GPU, given back when it ends however
/// it ends.
struct Held<'a> {
    gpu: &'a Gpu,
    ticket: u64,
    lane: Option<Lane>,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gpu.share.release(self.ticket);
        if let Some(lane) = self.lane.take() {
            self.gpu.lanes.put(lane);
        }
    }
}

/// The GPU's side of one launch of `k`.
struct GpuLaunch<'a> {
    gpu: &'a Gpu,
    k: &'a Loaded,
    /// The launch's stream and control word.
    lane: &'a Lane,
    /// Its number for the GPU's holds (`share.rs`).
    ticket: u64,
}

/// The GPU's state for one launch: its shape, the device half of the
/// save area, and what the grid's rounds counted.
pub(super) struct GpuState {
    /// Slots (threads) of the grid.
    pub(super) slots: usize,
    /// Claims the range is cut into ([`LaunchReport::chunks`]): each
    /// slot's grid-stride part is one.
    chunks: u64,
    /// Slots per TLAB (0: no TLABs).
    pub(super) group: u64,
    /// Heap words a TLAB refill carves.
    pub(super) tlab_words: u64,
    /// The device half of the save area.
    pub(super) area_dev: DeviceMem,
    /// Whether the device half holds no record (every word all ones):
    /// filled at a launch's start only when a run may have left one.
    pub(super) area_clean: bool,
    /// What the rounds counted, for the report.
    pub(super) totals: GridTotals,
}

/// What a launch's rounds on the grid counted besides the protocol's
/// account.
#[derive(Debug, Default)]
pub(super) struct GridTotals {
    /// Grids launched.
    pub(super) launches: u64,
    /// Safepoints passed with the slots waiting in place.
    pub(super) waits: u64,
    /// Runs that started beside another launch's hold
    /// ([`LaunchReport::runs_beside`]).
    pub(super) runs_beside: u64,
    /// Bytes sent to the device.
    pub(super) to_device: u64,
    /// Bytes brought back (besides what host code fetched).
    pub(super) to_host: u64,
    /// The device's counters (`offload_abi::gpu::counter`), summed over
    /// the launch's rounds.
    pub(super) counters: [u64; counter::COUNT],
    /// What host code had fetched from the device image when the launch
    /// started (what it fetches during the launch counts as brought back).
    pub(super) fetched_before: u64,
    /// The virtual GPU's noted counters of the launch's stream when the
    /// launch started (`None` on a real GPU).
    pub(super) noted_before: Option<std::collections::BTreeMap<String, u64>>,
}

impl Compiled for GpuLaunch<'_> {
    type State = GpuState;
    const DEVICE: Device = Device::Cuda;

    fn prepare(
        &self,
        env: &LaunchEnv,
        _call: KernelCall<'_>,
        plan: &Plan,
        range: &Range<i64>,
    ) -> Result<(GpuState, usize, SaveArea), OffloadError> {
        let (gpu, k) = (self.gpu, self.k);
        let meta = &k.ptx.meta;
        let total = range.end.wrapping_sub(range.start) as u64;
        let slots = match env.settings.device_slots {
            Some(n) => n.min((k.grid * BLOCK) as usize),
            None => default_slots(total, (k.grid * BLOCK) as usize, gpu.sms),
        };
        // The save area: the last launch's when it has this launch's shape
        // (every record of it empty), a new one otherwise.
        let reuse = gpu
            .scratch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .filter(|c| {
                c.area.slots() == slots * RECORDS_PER_SLOT && c.area.layout() == meta.layout
            });
        let Scratch {
            area,
            area_dev,
            area_clean,
        } = match reuse {
            Some(c) => c,
            None => {
                Scratch {
                    area: SaveArea::try_new(slots * RECORDS_PER_SLOT, meta.layout)
                        .map_err(|e| OffloadError::Setup(e.to_string()))?,
                    // Unset: filled empty at the launch's start (`grid.rs`).
                    area_dev: DeviceMem::new(
                        &gpu.ctx,
                        slots * RECORDS_PER_SLOT * meta.layout.record_words as usize * 8,
                    )
                    .map_err(cuda_err("save area"))?,
                    area_clean: false,
                }
            }
        };
        // The kernel's TLAB size, if its policy changed it.
        let tlab_words = u64::from(plan.tlab_bytes.unwrap_or(env.heap.config().tlab_bytes) / 8);
        // Slots per TLAB: `SharedTlab { group }` shares one TLAB among
        // `group` warps (the device has no fail-on-overflow variant: its
        // allocators wait for the refiller); `PrivateTlab` gives each slot
        // its own; `EdenCas` allocates every object from eden.
        let group = match env.settings.policy {
            offload_heap::AllocPolicy::EdenCas => 0,
            offload_heap::AllocPolicy::PrivateTlab => 1,
            offload_heap::AllocPolicy::SharedTlab { group }
            | offload_heap::AllocPolicy::FailOnOverflow { group } => WARP * group.max(1) as u64,
        };
        let state = GpuState {
            slots,
            chunks: total.min(slots as u64),
            group,
            tlab_words,
            area_dev,
            area_clean,
            totals: GridTotals {
                counters: [0; counter::COUNT],
                fetched_before: env.heap.residency().fetched_bytes,
                noted_before: gpu.noted_counters(self.lane),
                ..GridTotals::default()
            },
        };
        Ok((state, slots, area))
    }

    fn wait_bits(&self, env: &LaunchEnv) -> u32 {
        if env.settings.wait_in_place {
            offload_abi::control::WAIT
        } else {
            0
        }
    }

    fn units(
        &self,
        launch: &Launch<'_>,
        state: &mut GpuState,
        range: &Range<i64>,
    ) -> Result<Vec<UnitOut>, OffloadError> {
        let block = block_for(self.gpu, launch, state)?;
        // A part of a split launch: registered with the heap's twins until
        // the grid is done (`part.rs`).
        let part = launch
            .call
            .split
            .map(|_| super::part::PartWrite::new(&launch.env.heap));
        let mut grid = Grid::new(
            (self.gpu, self.lane, self.ticket),
            self.k,
            (launch, part.as_ref()),
            state,
            block,
            range.clone(),
        );
        let out = protocol::drive(launch, &mut grid);
        let nodes = match &out {
            Ok(_) => grid.take_nodes(),
            Err(_) => Ok(Vec::new()),
        };
        // The block serves the next launch (after an error too: every run
        // is over, or its kernel failed).
        *self
            .gpu
            .block
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(grid.into_block());
        let mut out = out?;
        out.nodes = nodes?;
        Ok(vec![out])
    }

    fn finish(
        &self,
        env: &LaunchEnv,
        state: GpuState,
        area: SaveArea,
        alloc: Allocator<'_>,
        _safepoints_before: u64,
    ) -> DeviceFacts {
        let gpu = self.gpu;
        let GpuState {
            chunks,
            area_dev,
            area_clean,
            totals,
            ..
        } = state;
        // Every record is empty again (each way out of the rounds clears
        // what it leaves): the area serves the next launch.
        debug_assert!(area.is_clear_in(0..area.slots()));
        *gpu.scratch.lock().unwrap_or_else(PoisonError::into_inner) = Some(Scratch {
            area,
            area_dev,
            area_clean,
        });
        // Every run has finished, and no other launch used the lane
        // meanwhile: what its stream counted since the start is its own.
        let dispatch = totals.noted_before.as_ref().and_then(|before| {
            let after = gpu.noted_counters(self.lane)?;
            Some(crate::report::Dispatches::between(
                before,
                &after,
                self.k.ptx.dispatch_by_address,
            ))
        });
        // The device's own counters: refills of its TLABs and allocations
        // that found its eden exhausted.
        let mut alloc_stats = alloc.retire();
        alloc_stats.refills += totals.counters[counter::REFILLS];
        alloc_stats.exhausted += totals.counters[counter::EDEN_FAILURES];
        DeviceFacts {
            chunks,
            alloc: alloc_stats,
            version: self.k.ptx.version,
            quick_tier: false,
            quick_workitems: 0,
            launches: Some(totals.launches),
            waits: totals.waits,
            runs_beside: totals.runs_beside,
            gpu: Some(gpu.label()),
            to_device_bytes: totals.to_device,
            to_host_bytes: totals.to_host
                + env
                    .heap
                    .residency()
                    .fetched_bytes
                    .saturating_sub(totals.fetched_before),
            dispatch,
        }
    }
}

/// Workitems per slot that a launch's slot count aims at (see
/// [`default_slots`]).
const ITEMS_PER_SLOT: u64 = 16;

/// The slots of a launch over `total` workitems when the settings name
/// none: one per [`ITEMS_PER_SLOT`] workitems, at least a block per
/// multiprocessor and at most the grid's `full` occupancy. Every slot
/// claims its chunks with an atomic on one cursor word and ends with
/// reductions on single words, and the device serializes atomics on one
/// address: with a slot per workitem (chunks of one), a saxpy launch over
/// 262,144 elements spent 590 µs in its kernel (Nsight Compute: 1.6
/// million atomic sectors, 1% of the SMs' throughput). One slot per 16
/// workitems made the bench's kernels 1.4–2.1x faster on an H200
/// (docs/GPU-RUNS.md).
fn default_slots(total: u64, full: usize, sms: u32) -> usize {
    let floor = sms as usize * BLOCK as usize;
    let want = usize::try_from(total.div_ceil(ITEMS_PER_SLOT)).unwrap_or(usize::MAX);
    want.max(floor).min(full)
}

/// A launch's save area, host and device halves (`slots` records each),
/// kept by the [`super::Gpu`] from one launch to the next: allocating and
/// writing a fresh one cost milliseconds a launch at a full GPU's slot
/// count (202,752 on an H100). Kept only with every host record empty;
/// the device half is set empty at each launch's start.
pub(super) struct Scratch {
    area: SaveArea,
    area_dev: DeviceMem,
    area_clean: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_has_a_slot_per_sixteen_workitems_within_the_grid() {
        let (full, sms) = (132 * 2048, 132);
        let floor = 132 * BLOCK as usize;
        assert_eq!(default_slots(0, full, sms), floor);
        assert_eq!(default_slots(1000, full, sms), floor);
        assert_eq!(default_slots(16 * 100_000, full, sms), 100_000);
        assert_eq!(default_slots(16 * 100_000 + 1, full, sms), 100_001);
        assert_eq!(default_slots(1 << 40, full, sms), full);
        // A grid smaller than a block per multiprocessor stays the bound.
        assert_eq!(default_slots(1 << 20, 512, sms), 512);
    }
}
