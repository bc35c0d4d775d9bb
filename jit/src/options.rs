//! How a kernel version is compiled: the options both backends take
//! ([`CompileOptions`]), fault injection included. The options change the
//! code, never the deopt metadata: a CPU and a PTX version compiled with
//! the same options have the same sites.

use offload_ir::Bci;

/// Fault injection compiled into a kernel version (tests only; a version
/// compiled without it pays nothing): workitems with
/// `w % modulus == remainder` deoptimize just before executing the
/// instruction at `site_bci` (which must be a deopt site), with `reason`
/// (one of the site's) or the site's first — as if its check had failed
/// spuriously, or a safepoint had stopped them there. A workitem resumed
/// on the device at that instruction does not take the injected deopt
/// again on the way in (later arrivals do).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Injection {
    /// The site.
    pub site_bci: Bci,
    /// Workitems are chosen by `w % modulus == remainder`.
    pub modulus: i64,
    /// See `modulus`.
    pub remainder: i64,
    /// The reason the deopt gives (`None`: the site's first).
    pub reason: Option<offload_deopt::Reason>,
}

/// Fault injection compiled into a kernel version: back-edge polls deopt
/// with reason `Safepoint` as if the host had requested a safepoint — every
/// `every`-th poll of a slot, or, with a `seed`, each poll with probability
/// 1/`every` (a per-slot xorshift stream seeded from `seed` and the slot).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct SafepointInjection {
    /// The period (or the inverse probability), at least 1.
    pub every: u64,
    /// Random instead of periodic.
    pub seed: Option<u64>,
}

/// How compiled code finds the class of a virtual call's receiver (and of
/// an object under `instanceof` or `checkcast`): from the tag of the page
/// it lies on (`offload_heap::pages`; the header only on mixed pages), or
/// from its header.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Dispatch {
    /// Each backend's faster way (BENCHMARKS.md, issue 48): by address on
    /// the GPU, where a warp's 32 header loads touch up to 32 sectors and
    /// one page-table load one or two; by header on the CPU, where the
    /// header shares a cache line with the fields the callee reads and
    /// the table costs a copy, a shift and a load more (by address,
    /// raycast took 1.06–1.07x the time and particles 0.99–1.02x).
    #[default]
    Auto,
    /// By address on every backend.
    ByAddress,
    /// By header on every backend.
    ByHeader,
}

impl Dispatch {
    /// Whether a backend reads page tags: `gpu` says which backend asks.
    pub fn by_address(self, gpu: bool) -> bool {
        match self {
            Dispatch::Auto => gpu,
            Dispatch::ByAddress => true,
            Dispatch::ByHeader => false,
        }
    }
}

/// How a kernel version is compiled. The default is what production runs:
/// polls at every back-edge, no fault injection.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Force deopts at a site (tests).
    pub inject: Option<Injection>,
    /// Force safepoint deopts at back-edge polls (tests).
    pub safepoints: Option<SafepointInjection>,
    /// Leave out the back-edge polls — only to measure what they cost: a
    /// safepoint then waits for each slot's current workitem to finish.
    pub no_polls: bool,
    /// Leave out the re-entry code (experiments): every stopped workitem is
    /// then finished by the host interpreter, as before devices could
    /// resume records ([`offload_deopt::SiteMap::reentry`]).
    pub no_reentry: bool,
    /// How the class of a virtual call's receiver, and of an object a
    /// class test (`instanceof`, `checkcast`) looks at, is found.
    pub dispatch: Dispatch,
    /// Compile for latency (the first tier): no Cranelift optimizations and
    /// single-pass register allocation — 2–2.5x quicker to compile, about 2x
    /// slower to run. The same lowering, deopt sites and metadata as the
    /// optimized tier, so records from either decode the same way.
    pub quick: bool,
    /// The parameters (bit `p` for parameter `p`) a launch sums into with
    /// a copy each slot has to itself (`offload_ir::summed`; the CPU
    /// device, whose slots run one workitem at a time): an atomic add
    /// certainly on one of them is a plain load, add and store. 0: every
    /// atomic is atomic.
    pub private_sums: u64,
}
