//! The interpreter's frames as roots of the collector: which of its value
//! slots hold references, from the verifier's types at each frame's
//! bytecode index.

use super::{Frame, Interpreter};
use crate::AfterWait;
use offload_heap::Roots;
use offload_ir::{Bci, Verified};

/// What the interpreter calls when eden is exhausted: collect the heap at a
/// safepoint, with `own` (the calling interpreter's frames) among the
/// roots. Returns whether the allocation should be tried again (a
/// collection ran, this caller's or another's); `false` means the heap is
/// full of live data and the allocation fails with `OutOfMemory`.
pub trait Collector: Sync {
    /// Collect; whether to retry.
    fn collect(&self, own: &mut dyn Roots) -> bool;

    /// The allocation still fails after [`Collector::collect`]: wait for
    /// room
    /// ([`crate::Control::wait_for_room`]), then (unless the wait ended at
    /// a safepoint) collect and call `alloc` inside the collection's
    /// safepoint. By default there is nothing to wait for.
    fn no_room(&self, own: &mut dyn Roots, alloc: &mut dyn FnMut() -> Option<u32>) -> AfterWait {
        let _ = (own, alloc);
        AfterWait::OutOfMemory
    }
}

impl std::fmt::Debug for dyn Collector + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Collector")
    }
}

/// The frames of one interpreter, stopped with the innermost at `top_pc`.
pub(super) struct FrameRoots<'s> {
    pub(super) v: &'s Verified,
    pub(super) stack: &'s mut [u64],
    pub(super) frames: &'s [Frame],
    pub(super) top_pc: Bci,
}

impl Roots for FrameRoots<'_> {
    fn visit(&mut self, f: &mut dyn FnMut(&mut u32)) {
        let n = self.frames.len();
        for (i, fr) in self.frames.iter().enumerate() {
            let pc = if i + 1 == n { self.top_pc } else { fr.pc };
            let Some(Some(types)) = self.v.types(fr.func).frames.get(pc as usize) else {
                continue;
            };
            let base = fr.base as usize;
            let nlocals = self.v.func(fr.func).locals.len();
            // A frame's operand stack ends where its callee's locals begin
            // (the arguments it pushed became them).
            let end = self
                .frames
                .get(i + 1)
                .map_or(self.stack.len(), |c| c.base as usize);
            let locals = types
                .locals
                .iter()
                .enumerate()
                .filter(|(_, t)| t.is_some_and(|t| t.is_ref()))
                .map(|(j, _)| base + j);
            let stack = types
                .stack
                .iter()
                .enumerate()
                .filter(|(_, t)| t.is_ref())
                .map(|(k, _)| base + nlocals + k)
                .take_while(|&at| at < end);
            for at in locals
                .chain(stack)
                .collect::<smallvec::SmallVec<[usize; 16]>>()
            {
                if let Some(slot) = self.stack.get_mut(at) {
                    let mut r = *slot as u32;
                    f(&mut r);
                    *slot = u64::from(r);
                }
            }
        }
    }
}

impl Interpreter<'_> {
    /// The frames as roots, the innermost stopped at `pc`.
    pub(super) fn frame_roots(&mut self, pc: Bci) -> FrameRoots<'_> {
        FrameRoots {
            v: self.prog.verified(),
            stack: &mut self.stack,
            frames: &self.frames,
            top_pc: pc,
        }
    }
}
