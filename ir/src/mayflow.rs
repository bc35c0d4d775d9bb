//! The forward may-analysis over a function's bytecode that
//! [`crate::summed`] and [`crate::own`] both run: what each operand-stack
//! slot and local may hold, as a set of bits joined by union at every
//! branch target, iterated to a fixed point over the verifier's frames.

use crate::isa::Inst;
use crate::types::{Bci, FuncId};
use crate::verifier::Verified;
use std::ops::{BitAnd, BitOr, Not};

/// What each stack slot (bottom first) and local may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Slots<T> {
    pub(crate) stack: Vec<T>,
    pub(crate) locals: Vec<T>,
}

/// A set of bits [`Slots`] hold.
pub(crate) trait Bits:
    Copy + Default + PartialEq + BitOr<Output = Self> + BitAnd<Output = Self> + Not<Output = Self>
{
}

impl<T> Bits for T where
    T: Copy + Default + PartialEq + BitOr<Output = T> + BitAnd<Output = T> + Not<Output = T>
{
}

impl<T: Bits> Slots<T> {
    /// Join `o` into `self`; whether anything changed.
    fn join(&mut self, o: &Slots<T>) -> bool {
        let mut changed = false;
        for (a, b) in self
            .stack
            .iter_mut()
            .chain(self.locals.iter_mut())
            .zip(o.stack.iter().chain(o.locals.iter()))
        {
            changed |= (*b & !*a) != T::default();
            *a = *a | *b;
        }
        changed
    }
}

/// Run the analysis of `func` from `locals` at its entry, every stack
/// slot `other` there and wherever a frame is deeper than what flows in:
/// `step` gives the state after an instruction from the state before it
/// (at every visit), or stops the analysis with its error.
pub(crate) fn run<T: Bits, E>(
    v: &Verified,
    func: FuncId,
    locals: Vec<T>,
    other: T,
    mut step: impl FnMut(Bci, Inst, Slots<T>) -> Result<Slots<T>, E>,
) -> Result<(), E> {
    let f = v.func(func);
    let types = v.types(func);
    let n = f.body.len();
    let depth = |b: usize| types.stack_depth(b);
    if n == 0 {
        return Ok(());
    }
    let mut at: Vec<Option<Slots<T>>> = vec![None; n];
    at[0] = Some(Slots {
        stack: vec![other; depth(0).unwrap_or(0)],
        locals,
    });
    let mut work = vec![0usize];
    while let Some(bci) = work.pop() {
        let Some(st) = at[bci].clone() else { continue };
        let inst = f.body[bci];
        let out = step(bci as Bci, inst, st)?;
        for s in inst.successors(bci as Bci) {
            let s = s as usize;
            let Some(d) = depth(s).filter(|_| s < n) else {
                continue;
            };
            let mut o = out.clone();
            o.stack.resize(d, other);
            let changed = match &mut at[s] {
                Some(cur) => cur.join(&o),
                slot @ None => {
                    *slot = Some(o);
                    true
                }
            };
            if changed {
                work.push(s);
            }
        }
    }
    Ok(())
}
