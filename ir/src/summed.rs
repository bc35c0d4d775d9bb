//! Which of a kernel's array parameters a launch may *sum into*: give each
//! group of slots a zeroed copy of the array to update, and add the copies
//! into the array when the launch ends (a histogram without every
//! workitem's atomic on the same few words; the runtime's `Arg::Sum`).
//!
//! That is only the same as updating the array itself when the kernel
//! does nothing with the array but add to its elements atomically: it may
//! `atomic_add` to an element (the old value it gets back is the group's
//! partial count, which it should not rely on), read its length, test it
//! against null, and copy it between locals and the operand stack. Any
//! other use — reading or storing an element, passing it to a function,
//! storing it in a field or another array, returning it — would see or
//! leak the copy, so it makes the parameter not summable. Integers only:
//! integer addition is associative and commutative (wrapping), so the sum
//! does not depend on which copy an update went to, or on the order the
//! copies are added in; a float sum would.
//!
//! The check is a forward may-analysis over the bytecode: which operand
//! stack slots and locals may hold the parameter's value.

use crate::isa::{Effect, Inst};
use crate::types::{Bci, Elem, FuncId, Type};
use crate::verifier::Verified;
use std::collections::BTreeSet;

/// Why a parameter cannot be summed: where and what the kernel does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotSummable {
    /// The instruction that uses the array otherwise (`None`: the
    /// parameter's type is not `i32[]` or `i64[]`).
    pub at: Option<Bci>,
    /// What it does, as a phrase ("reads an element").
    pub what: String,
}

/// The parameters of `func` (by local index, the index parameter 0 never
/// among them) a launch may sum into: `i32[]` and `i64[]` parameters the
/// kernel only adds to atomically ([`check`]).
pub fn summable_params(v: &Verified, func: FuncId) -> Vec<u32> {
    let f = v.func(func);
    (1..f.param_count)
        .filter(|&p| check(v, func, p).is_ok())
        .collect()
}

/// Whether parameter `param` of `func` may be summed into, or the first
/// use that forbids it.
pub fn check(v: &Verified, func: FuncId, param: u32) -> Result<(), NotSummable> {
    let f = v.func(func);
    match f.locals.get(param as usize).map(|l| l.ty) {
        Some(Type::Array(Elem::I32 | Elem::I64, 1)) => {}
        _ => {
            return Err(NotSummable {
                at: None,
                what: "is not an array of `i32` or `i64`".into(),
            });
        }
    }
    analyze(v, func, &[param], |_, _| {}).map_err(|(bci, what)| NotSummable {
        at: Some(bci),
        what,
    })
}

/// The atomic adds of `func` whose array is certainly one of `params`
/// (each summable): where a launch that gives every slot a copy of those
/// arrays of its own may add without an atomic instruction. Empty if one
/// of `params` is not summable.
pub fn private_atomics(v: &Verified, func: FuncId, params: &[u32]) -> BTreeSet<Bci> {
    if params.iter().any(|&p| check(v, func, p).is_err()) {
        return BTreeSet::new();
    }
    let mut at = BTreeSet::new();
    let mut maybe_not = BTreeSet::new();
    let r = analyze(v, func, params, |bci, array| {
        if array == SUMMED {
            at.insert(bci);
        } else {
            maybe_not.insert(bci);
        }
    });
    if r.is_err() {
        return BTreeSet::new();
    }
    // An atomic reached once with another array is not private.
    at.retain(|b| !maybe_not.contains(b));
    at
}

/// A value may be one of the summed arrays.
const SUMMED: u8 = 1;
/// A value may be something else.
const OTHER: u8 = 2;

/// The forward may-analysis: which stack slots and locals may hold one of
/// `params` ([`SUMMED`]) or something else ([`OTHER`]); `atomic` sees the
/// bits of each atomic add's array operand (at every visit). An error
/// names the first instruction that uses one of `params` otherwise.
fn analyze(
    v: &Verified,
    func: FuncId,
    params: &[u32],
    mut atomic: impl FnMut(Bci, u8),
) -> Result<(), (Bci, String)> {
    let f = v.func(func);
    let mut locals = vec![OTHER; f.locals.len()];
    for &p in params {
        locals[p as usize] = SUMMED;
    }
    crate::mayflow::run(v, func, locals, OTHER, |bci, inst, st: State| {
        if matches!(inst, Inst::I32ArrayAtomicAdd | Inst::I64ArrayAtomicAdd) {
            let d = st.stack.len();
            atomic(
                bci,
                st.stack.get(d.wrapping_sub(3)).copied().unwrap_or(OTHER),
            );
        }
        step(v, inst, st).map_err(|what| (bci, what))
    })
}

/// What each stack slot (bottom first) and local may hold: [`SUMMED`],
/// [`OTHER`] or both.
type State = crate::mayflow::Slots<u8>;

impl State {
    /// Pop `k` values; an error naming `what` if one may be a summed
    /// array.
    fn take(&mut self, k: usize, what: &str) -> Result<(), String> {
        let from = self.stack.len().saturating_sub(k);
        if self.stack[from..].iter().any(|&x| x & SUMMED != 0) {
            return Err(what.to_string());
        }
        self.stack.truncate(from);
        Ok(())
    }

    fn push(&mut self, k: usize) {
        self.stack.extend(std::iter::repeat_n(OTHER, k));
    }
}

/// The state after `inst`, or what the instruction does with the array.
fn step(v: &Verified, inst: Inst, mut st: State) -> Result<State, String> {
    match inst {
        Inst::Load { local } => {
            let x = st.locals.get(local.index()).copied().unwrap_or(OTHER);
            st.stack.push(x);
        }
        Inst::Store { local } => {
            let x = st.stack.pop().unwrap_or(OTHER);
            if let Some(l) = st.locals.get_mut(local.index()) {
                *l = x;
            }
        }
        Inst::Dup => {
            let x = st.stack.last().copied().unwrap_or(OTHER);
            st.stack.push(x);
        }
        Inst::Swap => {
            let d = st.stack.len();
            if d >= 2 {
                st.stack.swap(d - 1, d - 2);
            }
        }
        // Dropped, measured, tested against null or a type: harmless.
        Inst::Pop | Inst::BrNull { .. } | Inst::BrNonNull { .. } => {
            st.stack.pop();
        }
        Inst::ArrayLen | Inst::InstanceOf { .. } => {
            st.stack.pop();
            st.push(1);
        }
        Inst::CheckCast { .. } => {}
        // An atomic add: the array is the operand below the index and
        // the value (both numbers).
        Inst::I32ArrayAtomicAdd | Inst::I64ArrayAtomicAdd => {
            st.take(2, "adds it to another array")?;
            st.stack.pop();
            st.push(1);
        }
        Inst::Call { func } | Inst::CallVirt { method: func } => {
            let callee = v.func(func);
            st.take(
                callee.param_count as usize,
                &format!("passes it to `{}`", callee.name),
            )?;
            st.push(usize::from(callee.ret.is_some()));
        }
        Inst::Ret => st.take(st.stack.len(), "returns it")?,
        Inst::PutField { .. } => st.take(2, "stores it in a field")?,
        Inst::RefAStore => st.take(3, "stores it in an array")?,
        Inst::RefALoad | Inst::GetField { .. } | Inst::NewArray { .. } => {
            let pops = match inst {
                Inst::RefALoad => 2,
                _ => 1,
            };
            st.take(pops, "uses it")?;
            st.push(1);
        }
        Inst::RefNull | Inst::New { .. } => st.push(1),
        Inst::Inc { .. } | Inst::Throw { .. } => {}
        _ => match inst.opcode().effect() {
            Effect::Fixed { pops, pushes } => {
                let what = match inst {
                    Inst::I32ALoad | Inst::I64ALoad => "reads an element".to_string(),
                    Inst::I32AStore | Inst::I64AStore => "stores an element".to_string(),
                    _ => format!("uses it in `{}`", inst.opcode().mnemonic()),
                };
                st.take(pops.len(), &what)?;
                st.push(pushes.len());
            }
            // Every special instruction is matched above; one added
            // later counts as a use until it is.
            Effect::Special(_) => {
                if st.stack.iter().any(|&x| x & SUMMED != 0) {
                    return Err(format!("uses it in `{}`", inst.opcode().mnemonic()));
                }
            }
        },
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdicts(src: &str) -> Vec<(u32, Result<(), NotSummable>)> {
        let v = crate::load("t.obc", src).expect("valid");
        let k = v.func_named("k").expect("kernel");
        (1..v.func(k).param_count)
            .map(|p| (p, check(&v, k, p)))
            .collect()
    }

    #[test]
    fn an_array_only_added_to_atomically_is_summable() {
        let src = "
kernel k(i: i64, data: i32[], bins: i32[]) {
    load bins
    load data
    load i
    i64.to_i32
    i32.aload
    load bins
    array.len
    i32.rem
    i32.const 1
    i32.array_atomic_add
    pop
    ret
}";
        let v = verdicts(src);
        assert_eq!(v[1], (2, Ok(())));
        // `data` is read: not summable.
        let e = v[0].1.clone().unwrap_err();
        assert_eq!(e.what, "reads an element");
        assert_eq!(e.at, Some(4));
    }

    #[test]
    fn a_copy_through_a_local_is_followed() {
        let src = "
kernel k(i: i64, bins: i64[]) {
    local b: i64[]
    load bins
    store b
    load b
    i32.const 0
    i64.const 1
    i64.array_atomic_add
    pop
    load b
    i32.const 1
    i64.const 5
    i64.astore
    ret
}";
        let e = verdicts(src)[0].1.clone().unwrap_err();
        assert_eq!(e.what, "stores an element");
        assert_eq!(e.at, Some(10));
    }

    #[test]
    fn floats_calls_and_reads_are_refused() {
        let src = "
func g(a: i32[]) {
    ret
}
kernel k(i: i64, f: f32[], a: i32[], r: i32[]) {
    load a
    call g
    load r
    i32.const 0
    i32.aload
    pop
    ret
}";
        let v = verdicts(src);
        assert_eq!(v[0].1.clone().unwrap_err().at, None);
        assert_eq!(v[1].1.clone().unwrap_err().what, "passes it to `g`");
        assert_eq!(v[2].1.clone().unwrap_err().what, "reads an element");
    }

    #[test]
    fn only_atomics_certainly_on_a_summed_array_are_private() {
        let src = "
kernel k(i: i64, a: i32[], b: i32[], c: i32) {
    local x: i32[]
    load a
    i32.const 0
    i32.const 1
    i32.array_atomic_add
    pop
    load b
    store x
    load c
    br_if other
    load a
    store x
  other:
    load x
    i32.const 0
    i32.const 1
    i32.array_atomic_add
    pop
    ret
}";
        let v = crate::load("t.obc", src).expect("valid");
        let k = v.func_named("k").unwrap();
        // `a` summed: the first add is private; the second may be on `b`.
        assert_eq!(private_atomics(&v, k, &[1]), BTreeSet::from([3]));
        // Both summed: both adds are private.
        assert_eq!(private_atomics(&v, k, &[1, 2]), BTreeSet::from([3, 14]));
        // None summed: none.
        assert!(private_atomics(&v, k, &[]).is_empty());
    }
}
