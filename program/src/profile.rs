//! Profiles for speculation: per-site branch counts, receiver classes at
//! virtual calls, and nulls seen. Collected per worker and merged by adding.

use offload_ir::{Bci, FuncId, Verified};
use smallvec::SmallVec;

/// The profile of one function, indexed by bytecode index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FuncProfile {
    /// `[taken, not taken]` at each conditional branch.
    pub branches: Vec<[u64; 2]>,
    /// Receiver classes (module class ids) and their counts at virtual calls.
    pub receivers: Vec<SmallVec<[(u32, u64); 2]>>,
    /// Times a null reached each null-checking instruction or `br_null`.
    pub nulls: Vec<u64>,
    /// Times each instruction ran (the entry count is `execs[0]`).
    pub execs: Vec<u64>,
}

/// A whole module's profile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Profile {
    /// By function.
    pub funcs: Vec<FuncProfile>,
}

impl Profile {
    /// An empty profile shaped for `v`.
    pub fn new(v: &Verified) -> Profile {
        Profile {
            funcs: v
                .funcs
                .iter()
                .map(|f| {
                    let n = f.body.len();
                    FuncProfile {
                        branches: vec![[0; 2]; n],
                        receivers: vec![SmallVec::new(); n],
                        nulls: vec![0; n],
                        execs: vec![0; n],
                    }
                })
                .collect(),
        }
    }

    /// Add `other` into `self` (they must be shaped for the same module).
    pub fn merge(&mut self, other: &Profile) {
        for (a, b) in self.funcs.iter_mut().zip(&other.funcs) {
            for (x, y) in a.branches.iter_mut().zip(&b.branches) {
                x[0] += y[0];
                x[1] += y[1];
            }
            for (x, y) in a.nulls.iter_mut().zip(&b.nulls) {
                *x += y;
            }
            for (x, y) in a.execs.iter_mut().zip(&b.execs) {
                *x += y;
            }
            for (x, y) in a.receivers.iter_mut().zip(&b.receivers) {
                for &(class, n) in y {
                    match x.iter_mut().find(|(c, _)| *c == class) {
                        Some(e) => e.1 += n,
                        None => x.push((class, n)),
                    }
                }
            }
        }
    }

    /// Reset every counter to zero, keeping the shape.
    pub fn clear(&mut self) {
        for f in &mut self.funcs {
            f.branches.iter_mut().for_each(|b| *b = [0; 2]);
            f.receivers.iter_mut().for_each(smallvec::SmallVec::clear);
            f.nulls.iter_mut().for_each(|n| *n = 0);
            f.execs.iter_mut().for_each(|n| *n = 0);
        }
    }

    /// Count one execution of the branch at `bci` of `f`, `taken` or not.
    pub fn branch(&mut self, f: FuncId, bci: Bci, taken: bool) {
        self.funcs[f.index()].branches[bci as usize][usize::from(!taken)] += 1;
    }

    /// Count one receiver of global class `class` at the virtual call at
    /// `bci` of `f`.
    pub fn receiver(&mut self, f: FuncId, bci: Bci, class: u32) {
        let r = &mut self.funcs[f.index()].receivers[bci as usize];
        match r.iter_mut().find(|(c, _)| *c == class) {
            Some(e) => e.1 += 1,
            None => r.push((class, 1)),
        }
    }

    /// Count one null seen at `bci` of `f`.
    pub fn null(&mut self, f: FuncId, bci: Bci) {
        self.funcs[f.index()].nulls[bci as usize] += 1;
    }

    /// Count one execution of the instruction at `bci` of `f`.
    pub fn exec(&mut self, f: FuncId, bci: Bci) {
        self.funcs[f.index()].execs[bci as usize] += 1;
    }
}
