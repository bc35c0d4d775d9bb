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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

/// A first launch of this many workitems or more waits for the optimized
/// code instead of starting on the quick tier: even the cheapest kernel
/// runs longer on the quick tier than the optimized compile takes. saxpy,
/// on the development machine's two workers: the quick tier 3 ns per
/// workitem, the optimized code 0.24 ns (SIMD groups, no bounds checks);
/// the quick compile about 1 ms, the optimized one 2.5 ms alone and up to
/// 7 ms beside two busy workers. Waiting costs about 1.5 ms more than the
/// quick compile, which the quick tier loses back after about 540,000
/// workitems (10^6: 4.5 ms against 2.25 ms without tiering); kernels that
/// are not SIMD groups run about half as fast on the quick tier, so pay
/// later. Over 10^7 workitems saxpy's first launch took 2.1x as long as
/// without tiering when it began on the quick tier and switched at its
/// slots' next claims, 1.0x waiting (5.8x before either).
pub(crate) const QUICK_TIER_MAX_WORKITEMS: u64 = 1 << 19;

/// The compiled code of one kernel version: the tier its first launch ran
/// (quick, or optimized when tiering is off), or why it cannot be compiled;
/// and the optimized tier once a background compile has made it.
#[derive(Debug)]
pub(crate) struct Tiers {
    first: Result<Arc<CompiledKernel>, JitError>,
    optimized: OnceLock<Arc<CompiledKernel>>,
    /// The `better` words of launches running the quick tier, set when the
    /// optimized code is ready ([`Tiers::watch`]).
    watching: Mutex<Vec<Weak<AtomicU32>>>,
}

impl Tiers {
    /// The best code there is now.
    fn best(&self) -> Result<Arc<CompiledKernel>, JitError> {
        match self.optimized.get() {
            Some(ck) => Ok(ck.clone()),
            None => self.first.clone(),
        }
    }

    /// The optimized code, if it is ready.
    pub(crate) fn optimized(&self) -> Option<&Arc<CompiledKernel>> {
        self.optimized.get()
    }

    /// A launch's `better` word (`offload_abi::cpu::LaunchCtx::better`):
    /// non-zero once the optimized code is ready — at once if it already
    /// is, else when [`Tiers::ready`] runs.
    pub(crate) fn watch(&self) -> Arc<AtomicU32> {
        let word = Arc::new(AtomicU32::new(0));
        let mut watching = self.watching.lock().unwrap_or_else(PoisonError::into_inner);
        // Checked under the lock `ready` takes after it sets the code: the
        // word is either set here or found in the list there.
        if self.optimized.get().is_some() {
            word.store(1, Ordering::Release);
        } else {
            watching.retain(|w| w.strong_count() > 0);
            watching.push(Arc::downgrade(&word));
        }
        word
    }

    /// The optimized code is `ck`: later launches run it, and running
    /// launches switch to it at their slots' next claims.
    fn ready(&self, ck: Arc<CompiledKernel>) {
        let _ = self.optimized.set(ck);
        let watching =
            std::mem::take(&mut *self.watching.lock().unwrap_or_else(PoisonError::into_inner));
        for word in watching.iter().filter_map(Weak::upgrade) {
            word.store(1, Ordering::Release);
        }
    }
}

/// The CPU device: the JIT, and the compiled code of every kernel
/// version launched (in their tiers).
#[derive(Debug)]
pub(crate) struct CpuDevice {
    jit: offload_jit::CpuJit,
    /// Compiled kernel versions by (module id, kernel, version, the
    /// parameters summed into privately), in their
    /// tiers, or why the kernel could not be compiled.
    compiled: dashmap::DashMap<(u64, offload_ir::FuncId, u32, u64), Arc<Tiers>>,
    /// Whether versions are compiled quick first, optimized in the
    /// background.
    tiered: bool,
    /// Whether a launch that began on the quick tier switches to the
    /// optimized code when it is ready ([`crate::RuntimeBuilder::tier_up`]).
    tier_up: bool,
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

    /// A CPU device that compiles `tiered` or not, and switches running
    /// launches to the optimized tier (`tier_up`) or not.
    pub(crate) fn new(tiered: bool, tier_up: bool) -> CpuDevice {
        CpuDevice {
            jit: offload_jit::CpuJit::new(),
            compiled: dashmap::DashMap::new(),
            tiered,
            tier_up,
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
    /// cached), with its tiers, or why it cannot be compiled. With tiering,
    /// a first use over fewer than [`QUICK_TIER_MAX_WORKITEMS`] workitems
    /// compiles the quick tier and starts the optimized compile on a
    /// background thread; later uses get the optimized code once it is
    /// done, and running launches switch to it at their next claims. Both
    /// tiers come from the same lowering, with the same deopt metadata.
    pub(crate) fn compiled(
        &self,
        env: &LaunchEnv,
        call: KernelCall<'_>,
        ver: &Version,
        workitems: u64,
    ) -> Result<(Arc<CompiledKernel>, Arc<Tiers>), JitError> {
        // Keyed by the module's id, which a runtime never reuses (an address or a
        // class base could come back for another module).
        // Code that adds to a slot's own copy of a summed array without
        // atomics is another compile (`runtime/summed.rs`).
        let private_sums = call.copies.map_or(0, |t| t.private_sums);
        let key = (call.module, call.kernel, ver.number, private_sums);
        if let Some(hit) = self.compiled.get(&key) {
            let tiers = hit.value().clone();
            return tiers.best().map(|ck| (ck, tiers));
        }
        let opts = offload_jit::CompileOptions {
            quick: self.tiered && workitems < QUICK_TIER_MAX_WORKITEMS,
            private_sums,
            ..env.settings.compile
        };
        let first = self
            .jit
            .compile_speculative(call.prog, call.kernel, ver.number, opts, &ver.spec)
            .map(Arc::new);
        let tiers = Arc::new(Tiers {
            first: first.clone(),
            optimized: OnceLock::new(),
            watching: Mutex::new(Vec::new()),
        });
        if let Ok(ck) = &first {
            if ck.quick {
                let (tiers, prog, spec) = (tiers.clone(), call.prog.clone(), ver.spec.clone());
                let (k, number) = (call.kernel, ver.number);
                let opts = offload_jit::CompileOptions {
                    private_sums,
                    ..env.settings.compile
                };
                let job = std::thread::Builder::new()
                    .name("offload-compile".into())
                    .spawn(move || {
                        let jit = offload_jit::CpuJit::new();
                        // The quick tier compiled, so this one does too; if it
                        // did not, launches would keep the quick tier.
                        if let Ok(ck) = jit.compile_speculative(&prog, k, number, opts, &spec) {
                            tiers.ready(Arc::new(ck));
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
                tiers.ready(ck.clone());
            }
        }
        self.compiled.insert(key, tiers.clone());
        first.map(|ck| (ck, tiers))
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
        let workitems = range.end.wrapping_sub(range.start) as u64;
        match self.compiled(env, call, &plan.version, workitems) {
            Ok((ck, tiers)) => {
                let tiers = self.tier_up.then_some(&*tiers);
                Ok(launch::run(env, range, call, &ck, tiers, plan, started))
            }
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
