//! Which speculations a kernel version is compiled with, chosen from the
//! interpreter's profile (docs/DESIGN.md, "Speculation and recompilation"):
//!
//! - a conditional branch that went only one way becomes a deopt on the
//!   other way (`Reason::Unreached`);
//! - a virtual call whose receivers were of one or two classes becomes a
//!   class guard per class with the implementation inlined behind it, and any
//!   other class deopts (`Reason::TypeGuard`) — instead of the full test
//!   over every class the module's hierarchy allows;
//! - a dereference that never saw null carries a guard that deopts as a
//!   failed speculation (`Reason::TypeGuard`) instead of a null check, so a
//!   policy can tell a broken assumption from a program that really
//!   dereferences null.
//!
//! Both backends ask the same [`Speculations`] at the same instructions, so
//! the CPU and the PTX version of a kernel record the same speculations at
//! the same sites (a test compares their metadata).

use offload_deopt::{Assumption, Speculation};
use offload_ir::isa::{Inst, hz};
use offload_ir::{Bci, ClassId, FuncId};
use offload_program::{Profile, Program};
use std::collections::{BTreeMap, BTreeSet};

/// How speculative a compilation may be.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SpecConfig {
    /// An instruction must have run at least this often in the profile to be
    /// speculated on (fewer: the profile says too little about it).
    pub min_execs: u64,
    /// A virtual call is guarded and inlined for at most this many receiver
    /// classes (HotSpot's bimorphic inlining: 2).
    pub max_receivers: usize,
}

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig {
            min_execs: 1,
            max_receivers: 2,
        }
    }
}

/// The speculations of one compilation, by instruction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Speculations {
    by_inst: BTreeMap<(FuncId, Bci), Vec<Assumption>>,
}

impl Speculations {
    /// No speculation: what a kernel compiles to without a profile.
    pub fn none() -> Speculations {
        Speculations::default()
    }

    /// Every speculation `profile` supports in the functions the kernel `k`
    /// can reach, except at the instructions in `excluded` (where an earlier
    /// version's speculation failed).
    pub fn from_profile(
        prog: &Program,
        profile: &Profile,
        cfg: SpecConfig,
        excluded: &BTreeSet<(FuncId, Bci)>,
    ) -> Speculations {
        let v = prog.verified();
        let mut by_inst: BTreeMap<(FuncId, Bci), Vec<Assumption>> = BTreeMap::new();
        for (fi, fp) in profile.funcs.iter().enumerate() {
            let func = FuncId::new(fi);
            if fi >= v.funcs.len() || prog.analysis(func).is_none() {
                continue;
            }
            for (bci, inst) in v.func(func).body.iter().enumerate() {
                let execs = fp.execs.get(bci).copied().unwrap_or(0);
                let at = (func, bci as Bci);
                if execs < cfg.min_execs.max(1) || excluded.contains(&at) {
                    continue;
                }
                let mut add = |a: Assumption| by_inst.entry(at).or_default().push(a);
                match inst {
                    Inst::BrIf { .. }
                    | Inst::BrUnless { .. }
                    | Inst::BrNull { .. }
                    | Inst::BrNonNull { .. } => {
                        let [taken, fell] = fp.branches[bci];
                        if taken + fell >= cfg.min_execs.max(1) && (taken == 0 || fell == 0) {
                            add(Assumption::Branch { taken: taken > 0 });
                        }
                    }
                    Inst::CallVirt { .. } => {
                        let seen = &fp.receivers[bci];
                        if fp.nulls[bci] == 0 {
                            add(Assumption::NonNull);
                        }
                        if !seen.is_empty()
                            && seen.len() <= cfg.max_receivers
                            && seen.iter().all(|&(c, _)| (c as usize) < v.classes.len())
                        {
                            let mut classes: Vec<ClassId> =
                                seen.iter().map(|&(c, _)| ClassId(c)).collect();
                            // Most frequent first: the first guard is the
                            // one most receivers pass.
                            classes.sort_by_key(|c| {
                                std::cmp::Reverse(
                                    seen.iter().find(|(x, _)| *x == c.0).map_or(0, |e| e.1),
                                )
                            });
                            add(Assumption::Receivers(classes));
                        }
                    }
                    _ if inst.opcode().hazards().has(hz::NULL_CHECK) && fp.nulls[bci] == 0 => {
                        add(Assumption::NonNull);
                    }
                    _ => {}
                }
            }
        }
        Speculations { by_inst }
    }

    /// The speculations, in (function, bci) order.
    pub fn iter(&self) -> impl Iterator<Item = Speculation> + '_ {
        self.by_inst.iter().flat_map(|(&(func, bci), v)| {
            v.iter().map(move |a| Speculation {
                func,
                bci,
                assumed: a.clone(),
            })
        })
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.by_inst.values().map(Vec::len).sum()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_inst.is_empty()
    }

    /// Add one (tests and tools that speculate without a profile).
    pub fn insert(&mut self, s: Speculation) {
        let v = self.by_inst.entry((s.func, s.bci)).or_default();
        if !v.contains(&s.assumed) {
            v.push(s.assumed);
        }
    }

    /// The branch direction assumed at `bci` of `func` (`true`: taken).
    pub fn branch(&self, func: FuncId, bci: Bci) -> Option<bool> {
        self.at(func, bci).find_map(|a| match a {
            Assumption::Branch { taken } => Some(*taken),
            _ => None,
        })
    }

    /// The receiver classes assumed at the virtual call at `bci` of `func`.
    pub fn receivers(&self, func: FuncId, bci: Bci) -> Option<&[ClassId]> {
        self.at(func, bci).find_map(|a| match a {
            Assumption::Receivers(c) => Some(c.as_slice()),
            _ => None,
        })
    }

    /// Whether the reference dereferenced at `bci` of `func` is assumed
    /// non-null.
    pub fn non_null(&self, func: FuncId, bci: Bci) -> bool {
        self.at(func, bci).any(|a| *a == Assumption::NonNull)
    }

    fn at(&self, func: FuncId, bci: Bci) -> impl Iterator<Item = &Assumption> + '_ {
        self.by_inst.get(&(func, bci)).into_iter().flatten()
    }
}
