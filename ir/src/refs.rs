//! What is known of references: a forward must-analysis that finds, at each
//! bytecode index, the operand-stack slots and locals that cannot be null,
//! and those that hold an object this invocation of the function allocated.
//!
//! Code generators use it to drop checks that cannot fail: a `getfield`,
//! `putfield`, `array.len` or `callvirt` whose receiver is known non-null
//! needs no null check, and a reference store into an object the workitem
//! itself allocated needs no write barrier (such an object is younger than
//! anything it could make escape; see the CPU device's barrier).
//!
//! # Facts
//!
//! - `new` and `newarray` push a **fresh** object (fresh implies non-null).
//! - `load l` pushes a *copy of `l`*: what is known of `l` applies to it,
//!   and whatever later proves the copy non-null proves `l` non-null.
//! - An instruction that dereferences a value — the receiver of `getfield`,
//!   `putfield`, `callvirt` and the field atomics, the array of `array.len`,
//!   of the array loads and stores and of the array atomics — proves it
//!   non-null for what follows (had it been
//!   null, the instruction would have thrown or deoptimized, and compiled
//!   code would not have gone on).
//! - `br_null` proves its operand non-null on the fall-through edge,
//!   `br_nonnull` on the taken edge.
//! - `store l` gives `l` what is known of the stored value; copies of the
//!   old `l` still on the stack keep what was known of it.
//! - `checkcast` passes its operand through (null passes a cast).
//! - Everything else pushes nothing known; parameters and unassigned
//!   locals (null) are unknown at entry.
//!
//! A join keeps what every predecessor knows. Facts only ever shrink
//! while the fixed point is sought, so the iteration ends. Unreachable
//! indices have no state.

use crate::isa::{Effect, Inst};
use crate::types::{Bci, FuncId};
use crate::verifier::Verified;
use fixedbitset::FixedBitSet;

/// What is known of one operand-stack slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RefFact {
    /// Nothing: it may be null (or it is not a reference).
    Unknown,
    /// Not null.
    NonNull,
    /// An object this invocation allocated (not null).
    Fresh,
    /// A copy of local `l` as it is now: what is known of `l` applies.
    Local(u32),
}

/// What is known at the entry of one bytecode index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefState {
    /// Locals that are not null.
    pub non_null: FixedBitSet,
    /// Locals that hold an object this invocation allocated.
    pub fresh: FixedBitSet,
    /// The operand stack, bottom first.
    pub stack: Vec<RefFact>,
}

impl RefState {
    /// `f` with a copy of a local replaced by what is known of the local.
    fn resolve(&self, f: RefFact) -> RefFact {
        match f {
            RefFact::Local(l) if self.fresh.contains(l as usize) => RefFact::Fresh,
            RefFact::Local(l) if self.non_null.contains(l as usize) => RefFact::NonNull,
            RefFact::Local(_) => RefFact::Unknown,
            other => other,
        }
    }

    /// What is known of the slot `from_top` below the top (0: the top).
    fn slot(&self, from_top: usize) -> RefFact {
        let n = self.stack.len();
        if from_top >= n {
            return RefFact::Unknown;
        }
        self.resolve(self.stack[n - 1 - from_top])
    }

    /// Whether the slot `from_top` below the top cannot be null.
    pub fn non_null(&self, from_top: usize) -> bool {
        matches!(self.slot(from_top), RefFact::NonNull | RefFact::Fresh)
    }

    /// Whether the slot `from_top` below the top holds an object this
    /// invocation allocated.
    pub fn fresh(&self, from_top: usize) -> bool {
        self.slot(from_top) == RefFact::Fresh
    }

    /// The slot `from_top` below the top was dereferenced without failing:
    /// if it is a copy of a local, that local is not null.
    fn proven(&mut self, from_top: usize) {
        let n = self.stack.len();
        if from_top < n
            && let RefFact::Local(l) = self.stack[n - 1 - from_top]
        {
            self.non_null.insert(l as usize);
        }
    }

    fn pop(&mut self, k: usize) {
        let n = self.stack.len();
        self.stack.truncate(n.saturating_sub(k));
    }

    /// Keep what both `self` and `other` know; returns whether `self`
    /// changed.
    fn meet(&mut self, other: &RefState) -> bool {
        let before = (self.non_null.count_ones(..), self.fresh.count_ones(..));
        let mut changed = false;
        if self.stack.len() != other.stack.len() {
            // The verifier makes depths agree; never trust a mismatch.
            changed = self.stack.iter().any(|&f| f != RefFact::Unknown);
            let n = self.stack.len().min(other.stack.len());
            self.stack = vec![RefFact::Unknown; n];
        }
        for i in 0..self.stack.len() {
            let (a, b) = (self.stack[i], other.stack[i]);
            if a == b {
                continue;
            }
            let m = match (self.resolve(a), other.resolve(b)) {
                (RefFact::Fresh, RefFact::Fresh) => RefFact::Fresh,
                (RefFact::Fresh | RefFact::NonNull, RefFact::Fresh | RefFact::NonNull) => {
                    RefFact::NonNull
                }
                _ => RefFact::Unknown,
            };
            if m != a {
                self.stack[i] = m;
                changed = true;
            }
        }
        self.non_null.intersect_with(&other.non_null);
        self.fresh.intersect_with(&other.fresh);
        changed || before != (self.non_null.count_ones(..), self.fresh.count_ones(..))
    }
}

/// The facts at the entry of every bytecode index of `func` (`None` where
/// unreachable).
pub fn ref_facts(v: &Verified, func: FuncId) -> Vec<Option<RefState>> {
    let f = v.func(func);
    let types = v.types(func);
    let n = f.body.len();
    let nl = f.locals.len();
    let mut at: Vec<Option<RefState>> = vec![None; n];
    if n == 0 {
        return at;
    }
    let depth = |b: usize| types.stack_depth(b);
    at[0] = Some(RefState {
        non_null: FixedBitSet::with_capacity(nl),
        fresh: FixedBitSet::with_capacity(nl),
        stack: vec![RefFact::Unknown; depth(0).unwrap_or(0)],
    });
    let mut work: Vec<usize> = vec![0];
    let mut queued = FixedBitSet::with_capacity(n);
    queued.insert(0);
    while let Some(bci) = work.pop() {
        queued.set(bci, false);
        let Some(st) = at[bci].clone() else { continue };
        let inst = f.body[bci];
        for (succ, out) in step(v, inst, bci as Bci, st) {
            let s = succ as usize;
            if s >= n {
                continue;
            }
            let mut out = out;
            // Keep the analysis's stack in step with the verifier's.
            match depth(s) {
                Some(d) if d == out.stack.len() => {}
                Some(d) => out.stack = vec![RefFact::Unknown; d],
                None => continue,
            }
            let changed = match &mut at[s] {
                Some(cur) => cur.meet(&out),
                slot @ None => {
                    *slot = Some(out);
                    true
                }
            };
            if changed && !queued.contains(s) {
                queued.insert(s);
                work.push(s);
            }
        }
    }
    at
}

/// For an instruction that dereferences one of its operands (other than a
/// call): that operand's place below the top, how many operands it pops
/// and how many results it pushes.
fn dereference(inst: Inst) -> Option<(usize, usize, usize)> {
    Some(match inst {
        Inst::GetField { .. } | Inst::ArrayLen => (0, 1, 1),
        Inst::PutField { .. } => (1, 2, 0),
        Inst::I32ALoad | Inst::I64ALoad | Inst::F32ALoad | Inst::F64ALoad | Inst::RefALoad => {
            (1, 2, 1)
        }
        Inst::I32AStore | Inst::I64AStore | Inst::F32AStore | Inst::F64AStore | Inst::RefAStore => {
            (2, 3, 0)
        }
        Inst::I32ArrayAtomicAdd | Inst::I64ArrayAtomicAdd => (2, 3, 1),
        Inst::I32ArrayCmpxchg | Inst::I64ArrayCmpxchg => (3, 4, 1),
        Inst::FieldAtomicAdd { .. } => (1, 2, 1),
        Inst::FieldCmpxchg { .. } => (2, 3, 1),
        _ => return None,
    })
}

/// The state after `inst` at `bci` on each of its outgoing edges.
fn step(v: &Verified, inst: Inst, bci: Bci, mut st: RefState) -> Vec<(Bci, RefState)> {
    let d = st.stack.len();
    if let Some((operand, pops, pushes)) = dereference(inst) {
        st.proven(operand);
        st.pop(pops);
        st.stack
            .extend(std::iter::repeat_n(RefFact::Unknown, pushes));
        return inst
            .successors(bci)
            .into_iter()
            .map(|s| (s, st.clone()))
            .collect();
    }
    match inst {
        Inst::Load { local } => st.stack.push(RefFact::Local(local.index() as u32)),
        Inst::Store { local } => {
            let l = local.index();
            let top = st.stack.pop().unwrap_or(RefFact::Unknown);
            let top = st.resolve(top);
            // Copies of the old value keep what was known of it.
            for i in 0..st.stack.len() {
                if st.stack[i] == RefFact::Local(l as u32) {
                    st.stack[i] = st.resolve(st.stack[i]);
                }
            }
            if l < st.non_null.len() {
                st.non_null
                    .set(l, matches!(top, RefFact::NonNull | RefFact::Fresh));
                st.fresh.set(l, top == RefFact::Fresh);
            }
        }
        Inst::Dup => {
            let top = st.stack.last().copied().unwrap_or(RefFact::Unknown);
            st.stack.push(top);
        }
        Inst::Swap => {
            if d >= 2 {
                st.stack.swap(d - 1, d - 2);
            }
        }
        Inst::New { .. } => st.stack.push(RefFact::Fresh),
        Inst::NewArray { .. } => {
            st.pop(1);
            st.stack.push(RefFact::Fresh);
        }
        Inst::CheckCast { .. } => {}
        Inst::Call { func } | Inst::CallVirt { method: func } => {
            let callee = v.func(func);
            let nargs = callee.param_count as usize;
            if matches!(inst, Inst::CallVirt { .. }) && nargs > 0 {
                st.proven(nargs - 1);
            }
            st.pop(nargs);
            if callee.ret.is_some() {
                st.stack.push(RefFact::Unknown);
            }
        }
        Inst::BrNull { .. } | Inst::BrNonNull { .. } => {
            let mut taken = st.clone();
            let mut fall = st;
            if matches!(inst, Inst::BrNull { .. }) {
                fall.proven(0);
            } else {
                taken.proven(0);
            }
            taken.pop(1);
            fall.pop(1);
            return vec![(inst.target().unwrap_or(bci + 1), taken), (bci + 1, fall)];
        }
        _ => match inst.opcode().effect() {
            Effect::Fixed { pops, pushes } => {
                st.pop(pops.len());
                st.stack
                    .extend(std::iter::repeat_n(RefFact::Unknown, pushes.len()));
            }
            // The rest (`ref.null`, `pop`, `inc`, `instanceof`, `throw`):
            // the verifier's depth at the successor fixes the count, and
            // nothing they push is known.
            Effect::Special(_) => {
                st.pop(match inst {
                    Inst::Pop | Inst::InstanceOf { .. } => 1,
                    _ => 0,
                });
                if matches!(inst, Inst::RefNull | Inst::InstanceOf { .. }) {
                    st.stack.push(RefFact::Unknown);
                }
            }
        },
    }
    inst.successors(bci)
        .into_iter()
        .map(|s| (s, st.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(src: &str, name: &str) -> (Verified, Vec<Option<RefState>>) {
        let v = crate::load("t.obc", src).expect("valid");
        let f = v.func_named(name).expect("function");
        let a = ref_facts(&v, f);
        (v, a)
    }

    const LIST: &str = "
class Node {
    field val: i64
    field next: Node
}
kernel list(i: i64, n: i32, out: i64[]) {
    local k: i32
    local head: Node
    local node: Node
    local s: i64
    ref.null
    store head
    i64.const 0
    store s
    i32.const 0
    store k
  build:
    load k
    load n
    i32.ge
    br_if walk
    new Node
    store node
    load node
    load i
    load k
    i32.to_i64
    i64.add
    putfield Node.val
    load node
    load head
    putfield Node.next
    load node
    store head
    inc k 1
    br build
  walk:
    load head
    br_null end
    load s
    load head
    getfield Node.val
    i64.add
    store s
    load head
    getfield Node.next
    store head
    br walk
  end:
    load out
    load i
    i64.to_i32
    load s
    i64.astore
    ret
}
";

    #[test]
    fn fresh_nodes_and_checked_heads_are_known_non_null() {
        let (_, a) = facts(LIST, "list");
        let at = |b: usize| a[b].as_ref().expect("reachable");
        // bci 17: `putfield Node.val` on the node just made.
        assert!(at(17).non_null(1) && at(17).fresh(1), "{:?}", at(17));
        // bci 20: `putfield Node.next`: a fresh receiver, an unknown value
        // (head is null the first time round).
        assert!(at(20).fresh(1));
        assert!(!at(20).non_null(0), "head may be null");
        // bci 29 and 33: `getfield` of head after `br_null` fell through.
        assert!(at(29).non_null(0) && !at(29).fresh(0));
        assert!(at(33).non_null(0));
        // bci 26: head at the loop header may be null again (it was
        // assigned a loaded field).
        assert!(!at(26).non_null(0));
        // bci 40: `i64.astore` into a parameter: unknown.
        assert!(!at(40).non_null(2));
    }

    #[test]
    fn joins_keep_only_what_every_path_knows() {
        let src = "
class C {
    field x: i32
}
kernel k(i: i64, p: C, out: i32[]) {
    local c: C
    load p
    store c
    load i
    i64.const 0
    i64.eq
    br_if other
    new C
    store c
    br join
  other:
    load c
    getfield C.x
    pop
    load p
    getfield C.x
    pop
  join:
    load c
    getfield C.x
    pop
    load p
    getfield C.x
    pop
    ret
}
";
        let (_, a) = facts(src, "k");
        let at = |b: usize| a[b].as_ref().expect("reachable");
        // bci 13: proving c (a copy of p when stored) says nothing of p.
        assert!(!at(13).non_null(0), "{:?}", at(13));
        // bci 16: c after the join: fresh on one path, proven by bci 10
        // on the other.
        assert!(at(16).non_null(0), "{:?}", at(16));
        assert!(!at(16).fresh(0), "not fresh on the `other` path");
        // bci 19: p is proven only on the `other` path.
        assert!(!at(19).non_null(0));
    }

    #[test]
    fn stores_and_nulls_forget_and_branches_refine() {
        let src = "
class C {
    field x: i32
    field n: C
}
kernel k(i: i64, p: C) {
    local c: C
    new C
    store c
    load c
    load c
    getfield C.n
    store c
    getfield C.x
    pop
    load c
    br_nonnull ok
    ret
  ok:
    load c
    getfield C.x
    pop
    ref.null
    store c
    load c
    getfield C.x
    pop
    load p
    dup
    getfield C.n
    pop
    getfield C.x
    pop
    ret
}
";
        let (_, a) = facts(src, "k");
        let at = |b: usize| a[b].as_ref().expect("reachable");
        // bci 6: the copy of the old (fresh) c survives the store.
        assert!(at(6).fresh(0), "{:?}", at(6));
        // bci 9: c now holds a loaded field: unknown.
        assert!(!at(9).non_null(0));
        // bci 12: `br_nonnull` taken: c is non-null.
        assert!(at(12).non_null(0));
        // bci 17: after `ref.null; store c`.
        assert!(!at(17).non_null(0));
        // bci 23: the `dup`ed copy of p, after the first `getfield` proved p.
        assert!(at(23).non_null(0));
        assert!(!at(21).non_null(0), "p itself is a parameter");
    }
}
