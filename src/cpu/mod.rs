//! The CPU device: compiled slot loops on every worker, on the launch
//! protocol of `protocol.rs` (docs/DESIGN.md, "How a launch flows").
//!
//! Each worker drives one slot as a unit of its own (`launch.rs`): it
//! enters the slot loop, which claims chunks — from its home part of the
//! range first — and writes a record into its part of the save area when
//! a workitem deoptimizes, going on with the next one; the slot returns
//! when its records are full, at a safepoint (its worker then parks until
//! the safepoint's operation is done), or when the range is exhausted,
//! leaving its unstarted rest in its slot words. The worker then drains
//! the slot's records: one stopped by a safepoint (or a full heap, after a
//! collection) at a loop header or an allocation is resumed by the slot
//! itself, entered to land there (the compiled side is `offload_jit`'s
//! re-entry copy of the body); every other one is replayed in the
//! interpreter on the worker's own thread. Then it enters the slot again,
//! with its unstarted rest first, until the range is exhausted.
//!
//! On a GPU the host replays after the whole grid returns and relaunches;
//! on the CPU the device's worker *is* a host thread, so each slot drains
//! its own records as soon as they are full and no slot waits for the
//! others (a deopt costs its replay, not a relaunch of everything). The
//! bookkeeping is O(workers × records per slot), whatever the range.

mod launch;

use crate::adaptive::{Plan, Version};
use crate::env::{KernelCall, LaunchEnv, Started};
use crate::error::OffloadError;
use crate::executor::{Executor, Unsupported};
use crate::report::LaunchReport;
use offload_jit::{CompiledKernel, JitError};
use std::ops::Range;
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};

/// The compiled code of one kernel version: the tier its first launch ran
/// (quick, or optimized when tiering is off), or why it cannot be compiled;
/// and the optimized tier once a background compile has made it.
#[derive(Debug)]
pub(crate) struct Tiers {
    first: Result<Arc<CompiledKernel>, JitError>,
    optimized: OnceLock<Arc<CompiledKernel>>,
}

impl Tiers {
    /// The best code there is now.
    fn best(&self) -> Result<Arc<CompiledKernel>, JitError> {
        match self.optimized.get() {
            Some(ck) => Ok(ck.clone()),
            None => self.first.clone(),
        }
    }
}

/// The CPU device: the JIT, and the compiled code of every kernel
/// version launched (in their tiers).
#[derive(Debug)]
pub(crate) struct CpuDevice {
    jit: offload_jit::CpuJit,
    /// Compiled kernel versions by (module id, kernel, version), in their
    /// tiers, or why the kernel could not be compiled.
    compiled: dashmap::DashMap<(u64, offload_ir::FuncId, u32), Arc<Tiers>>,
    /// Whether versions are compiled quick first, optimized in the
    /// background.
    tiered: bool,
    /// The background compiles not yet joined.
    background: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl CpuDevice {
    /// Drop the compiled versions of module `id` (its last handle is
    /// gone), freeing their code.
    pub(crate) fn forget_module(&self, id: u64) {
        self.compiled.retain(|k, _| k.0 != id);
    }

    /// The modules it holds compiled code of.
    pub(crate) fn module_ids(&self) -> Vec<u64> {
        self.compiled.iter().map(|e| e.key().0).collect()
    }

    /// A CPU device that compiles `tiered` or not.
    pub(crate) fn new(tiered: bool) -> CpuDevice {
        CpuDevice {
            jit: offload_jit::CpuJit::new(),
            compiled: dashmap::DashMap::new(),
            tiered,
            background: Mutex::new(Vec::new()),
        }
    }

    /// The JIT.
    pub(crate) fn jit(&self) -> &offload_jit::CpuJit {
        &self.jit
    }

    /// Wait until every background compile started so far has finished
    /// ([`crate::Runtime::finish_compiles`]).
    pub(crate) fn finish_compiles(&self) {
        loop {
            let pending = std::mem::take(
                &mut *self
                    .background
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            if pending.is_empty() {
                return;
            }
            for h in pending {
                // A compile that panicked leaves the quick tier in use.
                let _ = h.join();
            }
        }
    }

    /// Version `ver` of the closure's kernel (compiled on first use and
    /// cached), or why it cannot be compiled. With tiering, the first use
    /// compiles the quick tier and starts the optimized compile on a background
    /// thread; later uses get the optimized code once it is done. Both tiers
    /// come from the same lowering, with the same deopt metadata.
    pub(crate) fn compiled(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        ver: &Version,
    ) -> Result<Arc<CompiledKernel>, JitError> {
        // Keyed by the module's id, which a runtime never reuses (an address or a
        // class base could come back for another module).
        let key = (call.module, call.kernel, ver.number);
        if let Some(hit) = self.compiled.get(&key) {
            return hit.value().best();
        }
        let opts = offload_jit::CompileOptions {
            quick: self.tiered,
            ..env.settings.compile
        };
        let first = self
            .jit
            .compile_speculative(call.prog, call.kernel, ver.number, opts, &ver.spec)
            .map(Arc::new);
        let tiers = Arc::new(Tiers {
            first: first.clone(),
            optimized: OnceLock::new(),
        });
        if let Ok(ck) = &first {
            if ck.quick {
                let (tiers, prog, spec) = (tiers.clone(), call.prog.clone(), ver.spec.clone());
                let (k, number, opts) = (call.kernel, ver.number, env.settings.compile);
                let job = std::thread::Builder::new()
                    .name("offload-compile".into())
                    .spawn(move || {
                        let jit = offload_jit::CpuJit::new();
                        // The quick tier compiled, so this one does too; if it
                        // did not, launches would keep the quick tier.
                        if let Ok(ck) = jit.compile_speculative(&prog, k, number, opts, &spec) {
                            let _ = tiers.optimized.set(Arc::new(ck));
                        }
                    });
                // No thread to be had: launches keep the quick tier.
                if let Ok(h) = job {
                    let mut pending = self
                        .background
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Finished compiles need no joining.
                    pending.retain(|h| !h.is_finished());
                    pending.push(h);
                }
            } else {
                let _ = tiers.optimized.set(ck.clone());
            }
        }
        self.compiled.insert(key, tiers);
        first
    }
}

impl Executor for CpuDevice {
    fn launch(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        plan: &Plan,
        range: Range<i64>,
        started: Started,
    ) -> Result<Result<LaunchReport, OffloadError>, Unsupported> {
        match self.compiled(env, call, &plan.version) {
            Ok(ck) => Ok(launch::run(env, range, call, &ck, plan, started)),
            Err(why) => Err(Unsupported(why.to_string())),
        }
    }
}

/// Workitems per claim: about 32 claims per worker, for balance when
/// workitems differ in cost, and at most 16384. A claim is an atomic add on
/// a part's cursor (`offload_abi::cpu::Part`; when the range had one cursor for every
/// slot, with claims of 1024 saxpy over 2^20
/// workitems spent more time moving that cache line between cores than in
/// its vectorized body: 275 µs against 163 µs with claims of 16384). Once
/// the kernel's time per workitem is known (`item_ns`), a claim is also
/// at least [`CLAIM_NS`] of work: saxpy over 1,024 workitems made 64
/// claims of 16, two cores taking turns at the cursor's line (4.3 µs
/// per launch with claims of 4 µs of work, 6.0 before; with 1 µs, 8.9
/// against 15.1 at a slower hour; nbody's claims of 8 heavy workitems,
/// 2 µs each, are left as they were: 4 µs claims cost it 1.3x).
fn chunk_size(n: u64, workers: usize, item_ns: Option<f64>) -> i64 {
    let balanced = n / (workers as u64 * 32);
    let worth = item_ns.map_or(0, |ns| (CLAIM_NS / ns.max(0.01)) as u64);
    balanced.max(worth).clamp(1, 16384) as i64
}

/// The fewest claims a worker's home part of a launch's range is cut into
/// (with fewer, the range is one part).
const MIN_PART_CLAIMS: u64 = 4;

/// The least work a claim is worth, in nanoseconds: a claim costs about a
/// hundred when cores contend for the cursor, so this keeps the claims'
/// share of a launch's time under a few percent.
const CLAIM_NS: f64 = 1000.0;

#[cfg(test)]
mod tests {
    use super::chunk_size;

    #[test]
    fn claims_balance_and_are_worth_their_cost() {
        // Unknown cost: about 32 claims per worker, at most 16384.
        assert_eq!(chunk_size(1 << 20, 2, None), 16384);
        assert_eq!(chunk_size(1024, 2, None), 16);
        assert_eq!(chunk_size(10, 2, None), 1);
        // Cheap workitems: claims of at least a microsecond of work.
        assert_eq!(chunk_size(1024, 2, Some(2.0)), 500);
        assert_eq!(chunk_size(1 << 20, 2, Some(0.06)), 16384);
        // Dear ones: the balanced size wins.
        assert_eq!(chunk_size(512, 2, Some(250.0)), 8);
        assert_eq!(chunk_size(65536, 2, Some(60.0)), 1024);
        // A nonsense estimate still gives a claim.
        assert_eq!(chunk_size(1024, 2, Some(0.0)), 16384);
        assert_eq!(chunk_size(1024, 2, Some(f64::INFINITY)), 16);
    }
}
