//! Which array parameters a kernel reads and writes, and whether only at
//! the workitem's own element: the element whose index is the workitem's
//! number (parameter 0, the flat number of a multi-dimensional range too),
//! as `i32` or `i64`.
//!
//! A launch over part of a range then touches of such an array only the
//! elements of that part: the CPU device's part of a split launch fetches
//! and marks written only their chunks, where it fetched and marked every
//! chunk of every array it captures (`offload::footprint`). `out[i] = f(i)`,
//! `y[i] = a * x[i] + y[i]` and a histogram's `bins[i % 8] += 1` (any
//! element: `i % 8` is not `i`) are the three cases.
//!
//! The check is a forward may-analysis over the bytecode, as
//! [`crate::summed`]'s: which stack slots and locals may hold each array
//! parameter, and which hold exactly the workitem's number (`load` of
//! parameter 0, and its widening or narrowing between `i32` and `i64`:
//! the caller guarantees that the numbers of the range fit in an `i32`,
//! so the narrowing is exact). An element access whose index may be
//! anything else, or any other use of the array that could reach its
//! elements — passing it to a function, storing it in a field or another
//! array — makes the access [`Access::Any`].

use crate::isa::{Effect, Inst};
use crate::types::FuncId;
use crate::verifier::Verified;

/// How a kernel reaches the elements of one array parameter, one way
/// (reading or writing).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Access {
    /// Never.
    #[default]
    None,
    /// Only the workitem's own element.
    Own,
    /// Any element.
    Any,
}

/// How a kernel reaches the elements of one parameter (parameters that
/// are not arrays: never).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct ParamAccess {
    /// Element loads (and the old value of an atomic).
    pub reads: Access,
    /// Element stores and atomics.
    pub writes: Access,
}

impl ParamAccess {
    /// Reads and writes of any element.
    pub const ANY: ParamAccess = ParamAccess {
        reads: Access::Any,
        writes: Access::Any,
    };
}

/// How kernel `func` reaches each of its parameters' elements, by
/// parameter index (0, the workitem's number, reaches none). Everything
/// [`ParamAccess::ANY`] when the analysis cannot follow the kernel (more
/// than 62 parameters, or an instruction it does not know).
pub fn param_access(v: &Verified, func: FuncId) -> Vec<ParamAccess> {
    let f = v.func(func);
    let n = f.param_count as usize;
    let mut out = vec![ParamAccess::default(); n];
    if n > MAX_PARAMS || analyze(v, func, &mut out).is_none() {
        out = vec![ParamAccess::ANY; n];
    }
    if let Some(first) = out.first_mut() {
        *first = ParamAccess::default();
    }
    out
}

/// The most parameters the bit sets of [`Slot`] follow.
const MAX_PARAMS: usize = 62;

/// What a stack slot or local may hold: bit 0, something else; bit 1,
/// exactly the workitem's number; bit `p + 1`, array parameter `p`.
type Slot = u64;
const OTHER: Slot = 1;
const INDEX: Slot = 2;

fn param_bit(p: usize) -> Slot {
    1 << (p + 1)
}

/// The parameters whose bits `s` has.
fn params_in(s: Slot) -> impl Iterator<Item = usize> {
    (1..=MAX_PARAMS).filter(move |&p| s & param_bit(p) != 0)
}

/// Raise `a` to at least `to`.
fn raise(a: &mut Access, to: Access) {
    *a = (*a).max(to);
}

/// The may-analysis; `None` where it cannot follow the kernel.
fn analyze(v: &Verified, func: FuncId, out: &mut [ParamAccess]) -> Option<()> {
    let f = v.func(func);
    let mut locals = vec![OTHER; f.locals.len()];
    for (p, l) in locals.iter_mut().enumerate().take(out.len()) {
        *l = match (p, f.locals[p].ty) {
            (0, _) => INDEX,
            (_, crate::types::Type::Array(..)) => param_bit(p) | OTHER,
            _ => OTHER,
        };
    }
    crate::mayflow::run(v, func, locals, OTHER, |_, inst, st: State| {
        step(v, inst, st, out).ok_or(())
    })
    .ok()
}

/// What each stack slot (bottom first) and local may hold ([`Slot`]).
type State = crate::mayflow::Slots<Slot>;

impl State {
    /// Pop `k` values; every array parameter among them may have any of
    /// its elements read and written.
    fn escape(&mut self, k: usize, out: &mut [ParamAccess]) {
        let from = self.stack.len().saturating_sub(k);
        for &s in &self.stack[from..] {
            for p in params_in(s) {
                out[p] = ParamAccess::ANY;
            }
        }
        self.stack.truncate(from);
    }

    /// Pop `k` operands of an element access (the array, the index, a
    /// number).
    fn drop_operands(&mut self, k: usize) {
        let from = self.stack.len().saturating_sub(k);
        self.stack.truncate(from);
    }

    fn push(&mut self, k: usize) {
        self.stack.extend(std::iter::repeat_n(OTHER, k));
    }
}

/// An element access of the array in `array` at index `index`.
fn access(array: Slot, index: Slot, read: bool, write: bool, out: &mut [ParamAccess]) {
    let how = if index == INDEX {
        Access::Own
    } else {
        Access::Any
    };
    for p in params_in(array) {
        if read {
            raise(&mut out[p].reads, how);
        }
        if write {
            raise(&mut out[p].writes, how);
        }
    }
}

/// The state after `inst`; `None` for an instruction the analysis does
/// not know.
fn step(v: &Verified, inst: Inst, mut st: State, out: &mut [ParamAccess]) -> Option<State> {
    let top = |st: &State, k: usize| {
        st.stack[st.stack.len().checked_sub(k + 1)?..]
            .first()
            .copied()
    };
    match inst {
        Inst::Load { local } => {
            let x = st.locals.get(local.index()).copied().unwrap_or(OTHER);
            st.stack.push(x);
        }
        Inst::Store { local } => {
            let x = st.stack.pop().unwrap_or(OTHER);
            *st.locals.get_mut(local.index())? = x;
        }
        // The local is no longer the workitem's number.
        Inst::Inc { local, .. } => *st.locals.get_mut(local.index())? = OTHER,
        Inst::Dup => {
            let x = *st.stack.last()?;
            st.stack.push(x);
        }
        Inst::Swap => {
            let d = st.stack.len();
            if d < 2 {
                return None;
            }
            st.stack.swap(d - 1, d - 2);
        }
        // Exactly the number, in the other width.
        Inst::I32ToI64 | Inst::I64ToI32 => {
            let x = st.stack.pop()?;
            st.stack.push(if x == INDEX { INDEX } else { OTHER });
        }
        // Dropped, measured, tested against null or a type: no element.
        Inst::Pop | Inst::BrNull { .. } | Inst::BrNonNull { .. } => {
            st.stack.pop()?;
        }
        Inst::ArrayLen | Inst::InstanceOf { .. } => {
            st.stack.pop()?;
            st.push(1);
        }
        Inst::CheckCast { .. } | Inst::Throw { .. } => {}
        Inst::I32ALoad | Inst::I64ALoad | Inst::F32ALoad | Inst::F64ALoad => {
            let (array, index) = (top(&st, 1)?, top(&st, 0)?);
            access(array, index, true, false, out);
            st.drop_operands(2);
            st.push(1);
        }
        Inst::I32AStore | Inst::I64AStore | Inst::F32AStore | Inst::F64AStore => {
            let (array, index) = (top(&st, 2)?, top(&st, 1)?);
            access(array, index, false, true, out);
            // The value is a number.
            st.drop_operands(3);
        }
        Inst::I32ArrayAtomicAdd | Inst::I64ArrayAtomicAdd => {
            let (array, index) = (top(&st, 2)?, top(&st, 1)?);
            access(array, index, true, true, out);
            st.drop_operands(3);
            st.push(1);
        }
        Inst::I32ArrayCmpxchg | Inst::I64ArrayCmpxchg => {
            let (array, index) = (top(&st, 3)?, top(&st, 2)?);
            access(array, index, true, true, out);
            st.drop_operands(4);
            st.push(1);
        }
        Inst::Call { func } | Inst::CallVirt { method: func } => {
            let callee = v.func(func);
            st.escape(callee.param_count as usize, out);
            st.push(usize::from(callee.ret.is_some()));
        }
        Inst::Ret => {
            let d = st.stack.len();
            st.escape(d, out);
        }
        Inst::PutField { .. } => st.escape(2, out),
        Inst::RefAStore => st.escape(3, out),
        Inst::RefALoad => {
            st.escape(2, out);
            st.push(1);
        }
        Inst::GetField { .. } | Inst::NewArray { .. } => {
            st.escape(1, out);
            st.push(1);
        }
        Inst::FieldAtomicAdd { .. } => {
            st.escape(2, out);
            st.push(1);
        }
        Inst::FieldCmpxchg { .. } => {
            st.escape(3, out);
            st.push(1);
        }
        Inst::RefNull | Inst::New { .. } => st.push(1),
        _ => match inst.opcode().effect() {
            Effect::Fixed { pops, pushes } => {
                if st.stack.len() < pops.len() {
                    return None;
                }
                st.escape(pops.len(), out);
                st.push(pushes.len());
            }
            // An instruction added later: not followed until it is.
            Effect::Special(_) => return None,
        },
    }
    Some(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Access::{Any, None as No, Own};

    fn access_of(src: &str) -> Vec<(Access, Access)> {
        let v = crate::load("t.obc", src).expect("valid");
        let k = v.func_named("k").expect("kernel");
        param_access(&v, k)
            .into_iter()
            .skip(1)
            .map(|a| (a.reads, a.writes))
            .collect()
    }

    #[test]
    fn saxpy_reads_and_writes_its_own_elements() {
        let src = "
kernel k(i: i64, a: f32, x: f32[], y: f32[]) {
    load y
    load i
    i64.to_i32
    load a
    load x
    load i
    i64.to_i32
    f32.aload
    f32.mul
    load y
    load i
    i64.to_i32
    f32.aload
    f32.add
    f32.astore
    ret
}";
        assert_eq!(access_of(src), vec![(No, No), (Own, No), (Own, Own)]);
    }

    #[test]
    fn another_index_or_a_changed_number_is_any_element() {
        // bins[i % 8] += 1 through an atomic; out[i + 1]; a copy of the
        // number that was incremented.
        let src = "
kernel k(i: i64, bins: i32[], out: i32[], z: i32[]) {
    local j: i32
    load bins
    load i
    i64.to_i32
    i32.const 8
    i32.rem
    i32.const 1
    i32.array_atomic_add
    pop
    load out
    load i
    i64.to_i32
    i32.const 1
    i32.add
    i32.const 0
    i32.astore
    load i
    i64.to_i32
    store j
    inc j 1
    load z
    load j
    i32.const 0
    i32.astore
    ret
}";
        assert_eq!(access_of(src), vec![(Any, Any), (No, Any), (No, Any)]);
    }

    #[test]
    fn an_array_passed_on_is_any_element_and_a_local_copy_is_followed() {
        let src = "
func f(a: i64[]) -> i64 {
    load a
    i32.const 0
    i64.aload
    ret
}
kernel k(i: i64, p: i64[], q: i64[]) {
    local c: i64[]
    load q
    store c
    load c
    load i
    i64.to_i32
    load p
    call f
    i64.astore
    ret
}";
        assert_eq!(access_of(src), vec![(Any, Any), (No, Own)]);
    }

    #[test]
    fn a_number_merged_with_another_at_a_join_is_not_the_workitems() {
        let src = "
kernel k(i: i64, out: i64[]) {
    local j: i64
    load i
    store j
    load i
    i64.const 2
    i64.rem
    i64.to_i32
    br_unless same
    i64.const 0
    store j
  same:
    load out
    load j
    i64.to_i32
    i64.const 1
    i64.astore
    ret
}";
        assert_eq!(access_of(src), vec![(No, Any)]);
    }
}
