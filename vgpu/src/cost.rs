//! The cost model: what a launch would cost on hardware, counted exactly
//! while it runs, so that the speed of generated code can be judged
//! without a GPU (docs/DESIGN.md, "The virtual GPU").
//!
//! The simulator runs threads one at a time, never in lockstep, so the
//! model has to say which thread-level accesses a warp would have made
//! together. It groups them the way a converged warp issues them: the
//! *k*-th time the lanes of one warp run one memory instruction is one
//! warp-wide instruction. For straight-line code and loops whose lanes
//! run the same trip counts this is exactly what hardware issues; where
//! lanes diverge it pairs executions that hardware might issue apart,
//! which can only merge sectors that a divergent warp would fetch twice
//! (the count errs low on divergent code, equally for every kernel).
//!
//! What is counted, per launch ([`Costs`]):
//!
//! - **Global memory**: warp-wide load, store and atomic instructions that
//!   reached device memory, mapped host memory or the module's data
//!   (whatever their space qualifier said), and the distinct 32-byte
//!   sectors each touched — what a GPU's L1/L2 moves, so coalescing shows:
//!   32 lanes reading 32 consecutive floats touch 4 sectors, 32 scattered
//!   ones 32.
//! - **Atomics**: thread-level atomic and reduction operations on global
//!   memory, and the most of them on any one address — the chain a GPU
//!   serializes at that address's L2 slice, however many SMs issue them.
//! - **Strong loads**: `.volatile`, `.relaxed` and `.acquire` loads of
//!   global memory (the ones no cache may serve stale), and of those the
//!   `.sys`-scoped ones (`.volatile` is `.sys`), which on hardware go to
//!   the point of coherence with the host.
//! - **Fences**: every `fence`/`membar`, and of those the `.sys`-scoped
//!   ones, which wait for every earlier write to be visible to the host.
//!
//! Registers are not the simulator's to count (PTX registers are virtual):
//! `ptxas -v` says what a kernel really uses.

use rustc_hash::FxHashMap;

use crate::exec::{Access, Probe};
use crate::inst::{Op, Scope};
use crate::module::Module;

/// Bytes in a memory sector (the unit of L1/L2 traffic).
pub const SECTOR: u64 = 32;

/// What a launch cost (see the module docs for each figure's meaning).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Costs {
    /// Warp-wide global load, store and atomic instructions.
    pub mem_instructions: u64,
    /// 32-byte sectors those instructions touched (each instruction's
    /// distinct sectors, summed over instructions).
    pub sectors: u64,
    /// Thread-level atomic and reduction operations on global memory.
    pub atomics: u64,
    /// The most atomics on any one address in the launch.
    pub atomic_chain: u64,
    /// Thread-level `.volatile`/`.relaxed`/`.acquire` loads of global
    /// memory.
    pub strong_loads: u64,
    /// Of those, the `.sys`-scoped ones.
    pub sys_loads: u64,
    /// Thread-level fences.
    pub fences: u64,
    /// Of those, the `.sys`-scoped ones.
    pub sys_fences: u64,
    /// Per memory instruction that ran, by its PTX line, in line order —
    /// where the traffic comes from.
    pub by_line: Vec<LineCost>,
}

/// What one memory instruction (one PTX line) cost in a launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct LineCost {
    /// Its line in the module's PTX text.
    pub line: u32,
    /// Warp-wide instructions: each time the lanes of a warp ran it.
    pub instructions: u64,
    /// Thread-level executions: the lanes that ran it (lanes guarded off
    /// by a false predicate do not).
    pub lanes: u64,
    /// Sectors those instructions touched.
    pub sectors: u64,
}

/// One warp-wide instruction being assembled from its lanes.
#[derive(Default)]
struct Group {
    lanes: u32,
    sectors: smallvec::SmallVec<[u64; 6]>,
}

/// The collector of one launch.
pub(crate) struct Model {
    costs: Costs,
    /// Lanes of each warp (the last warp of a block may be partial).
    lanes_per_warp: Vec<u32>,
    /// Per function, per instruction: its index among the module's
    /// memory instructions (`u32::MAX` for the others).
    index: Vec<Vec<u32>>,
    /// How many memory instructions the module has.
    count: usize,
    /// Per memory instruction: its PTX line, and its costs so far.
    lines: Vec<LineCost>,
    /// Per thread: how often it has run each memory instruction (empty
    /// until its first).
    seen: Vec<Vec<u32>>,
    /// Warp-wide instructions not all of whose lanes have run yet, keyed
    /// by (warp, memory instruction, occurrence).
    open: FxHashMap<(u32, u32, u32), Group>,
    per_address: FxHashMap<u64, u64>,
}

impl Model {
    /// A model for a launch of `module` on `threads` threads in blocks of
    /// `per_block`.
    pub(crate) fn new(module: &Module, threads: usize, per_block: u32) -> Model {
        let mut count = 0u32;
        let mut lines = Vec::new();
        let index = module
            .funcs
            .iter()
            .map(|f| {
                f.code
                    .iter()
                    .map(|i| {
                        if matches!(i.op, Op::Ld { .. } | Op::St { .. } | Op::Atom { .. }) {
                            lines.push(LineCost {
                                line: i.line,
                                ..LineCost::default()
                            });
                            count += 1;
                            count - 1
                        } else {
                            u32::MAX
                        }
                    })
                    .collect()
            })
            .collect();
        let warps_per_block = per_block.div_ceil(crate::grid::WARP);
        let blocks = threads as u32 / per_block.max(1);
        let lanes_per_warp = (0..blocks * warps_per_block)
            .map(|w| {
                let first = (w % warps_per_block) * crate::grid::WARP;
                (per_block - first).min(crate::grid::WARP)
            })
            .collect();
        Model {
            costs: Costs::default(),
            lanes_per_warp,
            index,
            count: count as usize,
            lines,
            seen: vec![Vec::new(); threads],
            open: FxHashMap::default(),
            per_address: FxHashMap::default(),
        }
    }

    /// Counts what thread `t` (of grid-wide warp `warp`) just did.
    pub(crate) fn record(&mut self, t: usize, warp: u32, probe: Probe) {
        match probe {
            Probe::Fence { scope, .. } => {
                self.costs.fences += 1;
                self.costs.sys_fences += u64::from(scope == Scope::Sys);
            }
            Probe::Global {
                func,
                pc,
                addr,
                size,
                what,
            } => {
                match what {
                    Access::Load { strong, scope } => {
                        self.costs.strong_loads += u64::from(strong);
                        self.costs.sys_loads += u64::from(strong && scope == Some(Scope::Sys));
                    }
                    Access::Store => {}
                    Access::Atomic => {
                        self.costs.atomics += 1;
                        let n = self.per_address.entry(addr).or_insert(0);
                        *n += 1;
                        self.costs.atomic_chain = self.costs.atomic_chain.max(*n);
                    }
                }
                let at = self.index[func as usize][pc as usize];
                let seen = &mut self.seen[t];
                if seen.is_empty() {
                    seen.resize(self.count, 0);
                }
                let key = (warp, at, seen[at as usize]);
                seen[at as usize] += 1;
                let g = self.open.entry(key).or_default();
                g.lanes += 1;
                let last = (addr + size.max(1) - 1) / SECTOR;
                for s in addr / SECTOR..=last {
                    if !g.sectors.contains(&s) {
                        g.sectors.push(s);
                    }
                }
                if g.lanes >= self.lanes_per_warp[warp as usize] {
                    let g = self.open.remove(&key).expect("the group just updated");
                    self.close(at, g);
                }
            }
        }
    }

    fn close(&mut self, at: u32, g: Group) {
        self.costs.mem_instructions += 1;
        self.costs.sectors += g.sectors.len() as u64;
        let l = &mut self.lines[at as usize];
        l.instructions += 1;
        l.lanes += u64::from(g.lanes);
        l.sectors += g.sectors.len() as u64;
    }

    /// The launch's costs; instructions some lanes never reached (they
    /// exited or diverged) count as issued by the lanes that did.
    pub(crate) fn finish(mut self) -> Costs {
        let open: Vec<(u32, Group)> = self.open.drain().map(|(k, g)| (k.1, g)).collect();
        for (at, g) in open {
            self.close(at, g);
        }
        let mut by_line: Vec<LineCost> = self
            .lines
            .into_iter()
            .filter(|l| l.instructions > 0)
            .collect();
        by_line.sort_unstable();
        self.costs.by_line = by_line;
        self.costs
    }
}
