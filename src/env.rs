//! What a launch needs from the runtime, handed to a device instead of the
//! runtime itself: the heap, the worker pool, the control word, the
//! settings a launch reads ([`Settings`]), and the allocator and save-area
//! pool a launch draws from ([`LaunchEnv`]); and the kernel it runs
//! ([`KernelCall`]). The runtime (`runtime/`) owns one `LaunchEnv`; the
//! devices (`interp_device.rs`, `cpu.rs`, `cuda/`) see only it.

use offload_deopt::{SaveArea, SaveLayout};
use offload_heap::{AllocPolicy, AllocStats, Allocator, Heap, SharedTlab};
use offload_host_interp::{Control, Program};
use offload_ir::FuncId;
use offload_jit::{CompileOptions, SpecConfig};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::device::Device;

/// A test hook that rewrites the PTX text before the driver loads it
/// ([`crate::RuntimeBuilder::rewrite_ptx`]).
#[derive(Clone)]
pub(crate) struct PtxRewrite(pub(crate) Arc<dyn Fn(&str) -> String + Send + Sync>);

impl std::fmt::Debug for PtxRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PtxRewrite")
    }
}

/// The runtime's configuration that launches read, as the
/// [`crate::RuntimeBuilder`] set it (each field is documented on the
/// builder's method of the same name).
#[derive(Debug)]
pub(crate) struct Settings {
    /// The device launches run on (CUDA only when a GPU was found).
    pub(crate) device: Device,
    pub(crate) strict: bool,
    pub(crate) deadline: Option<Duration>,
    pub(crate) device_slots: Option<usize>,
    pub(crate) policy: AllocPolicy,
    pub(crate) alloc_buffers: bool,
    /// Split launches over several devices (`split.rs`).
    pub(crate) split: Option<crate::shares::SplitOver>,
    /// Split launches in equal shares whatever the devices' speeds.
    pub(crate) split_even: bool,
    pub(crate) profile: bool,
    pub(crate) compile: CompileOptions,
    pub(crate) deopt_records: usize,
    pub(crate) fail_refills: Option<(u64, u64)>,
    pub(crate) reclaim: bool,
    /// On the GPU, slots wait in place at a safepoint that moves nothing
    /// ([`crate::RuntimeBuilder::gpu_wait_in_place`]).
    pub(crate) wait_in_place: bool,
    pub(crate) warmup: u32,
    pub(crate) spec_cfg: SpecConfig,
    pub(crate) rewrite_ptx: Option<PtxRewrite>,
    pub(crate) gc: crate::gc::GcPolicy,
}

/// What every launch needs: the runtime's heap, workers, control word
/// and settings, and the pools a launch takes from and gives back to.
#[derive(Debug)]
pub(crate) struct LaunchEnv {
    pub(crate) heap: Heap,
    pub(crate) pool: rayon::ThreadPool,
    /// The CPU device's slots: the launching thread and `workers - 1`
    /// helpers (see `offload_gang`).
    pub(crate) gang: offload_gang::Gang,
    pub(crate) workers: usize,
    pub(crate) control: Control,
    pub(crate) settings: Settings,
    /// The collector: class shapes, handle roots, the launches in flight.
    pub(crate) gc: crate::gc::Collector,
    /// Empty save areas of finished CPU launches, kept for the next launch
    /// of the same shape (a fresh one per launch costs more than a small
    /// kernel's whole run).
    save_areas: Mutex<Vec<SaveArea>>,
}

impl LaunchEnv {
    pub(crate) fn new(
        heap: Heap,
        pool: rayon::ThreadPool,
        gang: offload_gang::Gang,
        workers: usize,
        settings: Settings,
    ) -> LaunchEnv {
        LaunchEnv {
            heap,
            pool,
            gang,
            workers,
            control: Control::new(),
            gc: crate::gc::Collector::new(settings.gc, workers),
            settings,
            save_areas: Mutex::new(Vec::new()),
        }
    }

    /// An allocator for a launch of `call` on `workers` slots, with the
    /// runtime's policy and the kernel's TLAB size if it has its own, and
    /// a TLAB per kind of what the kernel allocates, carved from pages of
    /// that kind (`Program::allocation_kinds`).
    pub(crate) fn allocator(
        &self,
        call: &KernelCall<'_>,
        workers: usize,
        tlab_bytes: Option<u32>,
    ) -> Allocator<'_> {
        let s = &self.settings;
        let mut a = Allocator::new(&self.heap, s.policy, workers)
            .with_buffers(s.alloc_buffers)
            .with_kinds(call.prog.allocation_kinds(call.kernel))
            .with_exhaustion_every(s.gc.stress);
        if let Some(t) = tlab_bytes {
            a = a.with_tlab_bytes(t);
        }
        match s.fail_refills {
            Some((first, every)) => a.with_refill_fault(first, every),
            None => a,
        }
    }

    /// Retire a launch's allocator: hand its objects back to eden
    /// ([`Allocator::reclaim`]) unless one may outlive the launch — a
    /// workitem stored one into an older object (`escaped`, the write
    /// barrier), or a safepoint operation, which had the heap to itself,
    /// ran since `safepoints_before` — or reclaiming is off.
    pub(crate) fn end_allocation(
        &self,
        alloc: Allocator<'_>,
        escaped: bool,
        safepoints_before: u64,
    ) -> AllocStats {
        let safepointed = self.control.count() != safepoints_before;
        if escaped || safepointed || !self.settings.reclaim {
            alloc.retire()
        } else {
            alloc.reclaim()
        }
    }

    /// An empty save area of `slots` records of `layout`: one a finished
    /// launch gave back, or a new one (an error says why none could be
    /// made).
    pub(crate) fn take_save_area(
        &self,
        slots: usize,
        layout: SaveLayout,
    ) -> Result<SaveArea, String> {
        let mut pool = self
            .save_areas
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match pool
            .iter()
            .position(|a| a.slots() == slots && a.layout() == layout)
        {
            Some(i) => Ok(pool.swap_remove(i)),
            None => SaveArea::try_new(slots, layout).map_err(|e| e.to_string()),
        }
    }

    /// Keep `area` for a later launch if every record in it is empty (a
    /// launch that failed part-way may leave records behind): the records
    /// in `written` are checked, the launch having written no other (a
    /// launch without deopts checks none; all of them took a microsecond
    /// per launch, a seventh of a small kernel's).
    pub(crate) fn give_back_save_area(&self, area: SaveArea, written: &[std::ops::Range<usize>]) {
        const KEPT: usize = 8;
        if written.iter().all(|r| area.is_clear_in(r.clone())) {
            let mut pool = self
                .save_areas
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if pool.len() == KEPT {
                pool.remove(0);
            }
            pool.push(area);
        }
    }
}

#[cfg(test)]
impl LaunchEnv {
    /// The save areas in the pool, each as whether every record of it is
    /// empty (for tests).
    pub(crate) fn pooled_save_areas(&self) -> Vec<bool> {
        let pool = self
            .save_areas
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        pool.iter().map(|a| a.is_clear_in(0..a.slots())).collect()
    }
}

/// Each slot's TLABs, one per kind of allocation (`Allocator::kinds`),
/// slot by slot (null for a slot without): compiled code finds the TLAB
/// of kind `k` of slot `s` at index `s * kinds + k`.
pub(crate) fn tlabs_of(alloc: &Allocator<'_>, workers: usize) -> Vec<*const SharedTlab> {
    let kinds = alloc.kinds().len();
    (0..workers * kinds)
        .map(|i| {
            alloc
                .tlab_for(i / kinds, i % kinds)
                .map_or(std::ptr::null(), std::ptr::from_ref)
        })
        .collect()
}

/// Whether every slot has TLABs and no two share one.
pub(crate) fn exclusive(tlabs: &[*const SharedTlab]) -> bool {
    let mut seen: Vec<_> = tlabs.to_vec();
    seen.sort_unstable();
    seen.dedup();
    seen.len() == tlabs.len() && !seen.contains(&std::ptr::null())
}

/// The kernel a launch runs: a closure's parts.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KernelCall<'a> {
    /// Its module's program.
    pub(crate) prog: &'a Arc<Program>,
    /// The kernel.
    pub(crate) kernel: FuncId,
    /// The captured values, as raw slots (type-checked against the
    /// kernel's parameters). A collection during the launch updates the
    /// references among them in place (they are roots of the launch, see
    /// [`crate::gc::LaunchRoots`]), so devices read them from here, not
    /// from a copy taken before.
    pub(crate) captures: &'a [AtomicU64],
    /// The module's id in the runtime (never reused: the key of compiled
    /// code).
    pub(crate) module: u64,
    /// How the launch combines the workitems' values, for a reducing
    /// kernel (`None` for one that returns nothing).
    pub(crate) reduce: Option<offload_abi::reduce::Combine>,
    /// The copies table of a kernel with parameters a launch may sum into
    /// (`offload_ir::summed`; the runtime's `runtime/summed.rs`), `None`
    /// for one without.
    pub(crate) copies: Option<CopyTable<'a>>,
    /// For a part of a launch split over devices (`crate::split`), the
    /// split's number (its interrupt ticket): a GPU's part sends from the
    /// heap's twins and shares chunks with the other GPUs' parts.
    pub(crate) split: Option<u64>,
}

/// A launch's copies table: `rows` rows of one raw slot per parameter of
/// the kernel a launch may sum into, in parameter order; a group of slots
/// (a CPU slot, a GPU block) takes those parameters from row
/// `group % rows`. The cells are roots of the launch (references, updated
/// by a collection), so devices read them from here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CopyTable<'a> {
    pub(crate) cells: &'a [AtomicU64],
    pub(crate) rows: usize,
    /// The summed parameters (bit `p` for parameter `p`) whose copies
    /// are each a CPU slot's own (`rows` at least the CPU's slots):
    /// compiled CPU code adds to them without atomics
    /// (`offload_jit::CompileOptions::private_sums`).
    pub(crate) private_sums: u64,
}

impl<'a> KernelCall<'a> {
    /// The kernel's name.
    pub(crate) fn name(&self) -> &str {
        &self.prog.verified().func(self.kernel).name
    }

    /// What the kernel returns for a reduction: its value type and how the
    /// launch combines the values (`None` for a kernel that returns
    /// nothing).
    pub(crate) fn reduction(
        &self,
    ) -> Option<(offload_abi::reduce::Scalar, offload_abi::reduce::Combine)> {
        let ty = crate::reduction::scalar_of(self.prog.verified().func(self.kernel).ret?)?;
        Some((ty, self.reduce?))
    }

    /// The captures now, as raw slots.
    pub(crate) fn capture_values(&self) -> impl Iterator<Item = u64> + '_ {
        self.captures
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Acquire))
    }

    /// The roots a device registers for its part of a launch: its
    /// allocator and save area (the captures are the launch's, registered
    /// before it picked the device).
    pub(crate) fn device_roots(
        alloc: &'a Allocator<'a>,
        area: Option<(&'a SaveArea, &'a offload_deopt::DeoptMetadata)>,
    ) -> crate::gc::LaunchRoots<'a> {
        crate::gc::LaunchRoots {
            captures: &[],
            ref_captures: Vec::new(),
            copies: &[],
            area,
            alloc: Some(alloc),
        }
    }

    /// An interpreter's hook for eden's exhaustion in a launch on `env`.
    pub(crate) fn on_exhausted(env: &'a LaunchEnv) -> crate::gc::OnExhausted<'a> {
        crate::gc::OnExhausted {
            gc: &env.gc,
            heap: &env.heap,
            control: &env.control,
        }
    }
}

/// When a launch started (its compile time counts from here: time spent
/// on a device's code that then could not run counts as compile time of
/// the launch that ran instead) and its interrupt ticket
/// ([`offload_host_interp::Control::interrupt_epoch`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Started {
    pub(crate) at: Instant,
    pub(crate) ticket: u64,
}

#[cfg(test)]
mod tests {
    use super::exclusive;

    #[test]
    fn tlabs_are_exclusive_only_when_each_slot_has_its_own() {
        let t: Vec<offload_heap::SharedTlab> = (0..3).map(|_| Default::default()).collect();
        let p = |i: usize| std::ptr::from_ref(&t[i]);
        assert!(exclusive(&[p(0), p(1), p(2)]));
        assert!(exclusive(&[p(2)]));
        assert!(!exclusive(&[p(0), p(0), p(1)]), "a group of two");
        assert!(!exclusive(&[p(0), std::ptr::null()]), "a slot without one");
    }
}
