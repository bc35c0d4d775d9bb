//! Passing the runtime's safepoint requests to a running grid: mirrored
//! into the device's control word, or — for a safepoint that moves no
//! object — passed with the slots waiting in place ([`Waiting`]), with
//! the fairness of `super`'s module docs.

use super::{Gpu, cuda_err};
use crate::env::LaunchEnv;
use crate::error::OffloadError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A launch runs at least as long as the last safepoint kept the device
/// from running (`owed`) before it honours the next request (see the
/// module docs of `super`); `asked` is when the request that stopped the
/// last run was mirrored.
#[derive(Debug, Default)]
pub(super) struct Fairness {
    owed: Duration,
    asked: Option<Instant>,
}

impl Waiting<'_> {
    /// Pass the launch's safepoint requests (its `control` word) to the
    /// kernel until `finished` says it is done: requests that stop the
    /// slots are mirrored into the device's word, those that let them wait
    /// are passed in place. Returns the bytes sent and received while
    /// waiting in place, and how many safepoints passed that way.
    pub(super) fn mirror(
        &self,
        control: &Arc<AtomicU32>,
        fair: &mut Fairness,
        finished: &dyn Fn() -> Result<bool, cudarc::driver::DriverError>,
        trace: &mut super::trace::Trace,
    ) -> Result<(u64, u64, u64), OffloadError> {
        let (gpu, slots) = (self.gpu, self.slots);
        let (mut sent, mut got, mut waits) = (0, 0, 0);
        if let Some(t) = fair.asked.take() {
            fair.owed = t.elapsed();
        }
        let mut run_from = Instant::now();
        while !finished().map_err(cuda_err("kernel"))? {
            let due = run_from.elapsed() >= fair.owed;
            let cw = if due {
                control.load(Ordering::Acquire)
            } else {
                0
            };
            if trace.on() {
                let parked_at = self.parked_at;
                trace.tick(|| {
                    let word = self
                        .lane
                        .control_word(&gpu.resident)
                        .map_or_else(|e| e.to_string(), |w| format!("{w:#x}"));
                    let mut n = [0u32];
                    let parked = match gpu.resident.read_raw(parked_at, &mut n) {
                        Ok(()) => n[0].to_string(),
                        Err(e) => e.to_string(),
                    };
                    format!(
                        "running: control word {word}, requested {cw:#x}, parked {parked} of {slots}"
                    )
                });
            }
            if cw & offload_abi::control::WAIT != 0 {
                let t = Instant::now();
                let (s, g) = self.wait_here(&|| finished().unwrap_or(true), trace)?;
                (fair.owed, run_from) = (t.elapsed(), Instant::now());
                sent += s;
                got += g;
                waits += u64::from(s + g > 0);
                continue;
            }
            // An interrupt of this launch passed while the slots waited:
            // they stop now.
            let stop = if self.env.control.interrupted_since(self.epoch) {
                offload_abi::control::SAFEPOINT
            } else {
                0
            };
            if cw != 0 && fair.asked.is_none() {
                fair.asked = Some(Instant::now());
            }
            self.lane.set_control(&gpu.resident, cw | stop)?;
            pause(run_from);
        }
        Ok((sent, got, waits))
    }
}

/// How long the host polls a running kernel without sleeping: a short
/// kernel is seen done within a poll, not a sleep's granularity.
const SPIN: Duration = Duration::from_micros(200);

/// Wait between two polls of a kernel running since `since`: yield the
/// processor for the first [`SPIN`], sleep 20 µs after.
fn pause(since: Instant) {
    if since.elapsed() < SPIN {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(20));
    }
}

/// A run whose slots are asked to wait in place at a safepoint.
pub(super) struct Waiting<'a> {
    pub(super) env: &'a LaunchEnv,
    pub(super) gpu: &'a Gpu,
    /// The launch's stream and control word.
    pub(super) lane: &'a super::lane::Lane,
    /// The run's footprint when it shares the GPU (`share.rs`).
    pub(super) footprint: Option<&'a [std::ops::Range<usize>]>,
    /// For a part of a split launch, the chunks wholly inside its device
    /// eden, never sent (`part.rs`).
    pub(super) fresh: std::ops::Range<usize>,
    /// For a part of a split launch, its registration with the heap's
    /// twins: its sends go from twins (`part.rs`).
    pub(super) part: Option<&'a super::part::PartWrite<'a>>,
    pub(super) slots: usize,
    /// The run's device eden, in heap words.
    pub(super) eden: (u32, u32),
    /// The device addresses of the eden's words, the parked count, the
    /// slots' exits and the dirty map.
    pub(super) eden_at: u64,
    pub(super) parked_at: u64,
    pub(super) exits_at: u64,
    pub(super) dirty_at: u64,
    pub(super) epoch: u64,
}

impl Waiting<'_> {
    /// Ask the slots to wait; once all wait (or are gone), mark what the
    /// kernel wrote so far, park this launch for the safepoint's
    /// operation, send what it wrote, and let the slots go on — or stop,
    /// when the safepoint was an interrupt of this launch. Returns the
    /// bytes sent and received (the parked count each time it is read, the
    /// eden's top, the dirty map and what the operation wrote; (0, 0) when
    /// the kernel finished first: then the safepoint is passed after the
    /// run, as for a stop). `finished` says whether the kernel is done.
    fn wait_here(
        &self,
        finished: &dyn Fn() -> bool,
        trace: &mut super::trace::Trace,
    ) -> Result<(u64, u64), OffloadError> {
        let (gpu, heap) = (self.gpu, &self.env.heap);
        let dh = &gpu.resident;
        self.lane.set_control(dh, offload_abi::control::WAIT)?;
        let mut n = [0u32];
        let mut got = 0u64;
        // Slots gone (exited: a code in their exit word), counted when the
        // parked ones do not make up the grid.
        let mut gone = 0usize;
        let mut exits = Vec::new();
        loop {
            if finished() {
                return Ok((0, 0));
            }
            dh.read_raw(self.parked_at, &mut n)?;
            got += 4;
            if n[0] as usize + gone < self.slots {
                exits.resize(self.slots, 0u8);
                dh.read_raw(self.exits_at, &mut exits)?;
                got += exits.len() as u64;
                gone = exits.iter().filter(|&&c| c != 0).count();
            }
            if n[0] as usize + gone >= self.slots {
                break;
            }
            trace.tick(|| {
                format!(
                    "waiting in place: {} of {} slots parked, {gone} gone",
                    n[0], self.slots
                )
            });
            std::thread::sleep(Duration::from_micros(20));
        }
        // Every slot waits with its writes fenced, or is gone: what the
        // kernel wrote so far is what host code may now fetch.
        let (es, ee) = self.eden;
        // An empty eden is a kernel that does not allocate: the block's
        // eden words were never sent (they are zero), and its top is `es`.
        let mut top = [u64::from(es)];
        if es < ee {
            dh.read_raw(
                self.eden_at + 8 * offload_abi::gpu::EDEN_TOP as u64,
                &mut top,
            )?;
            got += 8;
        }
        let top = top[0].min(u64::from(ee)) as usize * 8;
        let mut map = vec![0u8; top.div_ceil(offload_heap::resident::CHUNK_BYTES)];
        if !map.is_empty() {
            dh.read_raw(self.dirty_at, &mut map)?;
        }
        super::resident::mark_kernel_writes(heap, dh, &map, es as usize * 8, top);
        got += map.len() as u64;
        // The safepoint's operation runs while this launch is parked.
        self.env.control.poll();
        // A run that shares the GPU sends only its own arrays' chunks: the
        // other kernels waiting beside it send theirs (`share.rs`).
        let sent = match (self.footprint, self.part) {
            (Some(fp), Some(part)) => part.send(dh, fp, self.fresh.clone())?,
            (Some(fp), None) => dh.push(heap, &heap.take_device_stale_in(dh.id(), fp)?)?,
            (None, _) => dh.push(
                heap,
                &heap.take_device_stale(dh.id(), es as usize * 8..ee as usize * 8)?,
            )?,
        };
        let next = if self.env.control.interrupted_since(self.epoch) {
            offload_abi::control::SAFEPOINT
        } else {
            0
        };
        self.lane.set_control(dh, next)?;
        Ok((sent, got))
    }
}
