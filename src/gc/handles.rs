//! Handles the collector can update: every reference a user holds
//! ([`crate::Array`], [`crate::Object`], [`crate::RefArray`], an
//! [`crate::Arg::Ref`], a closure's captured references, the REPL's
//! variables) is a [`Root`], a cell the runtime's root table knows. A
//! collection that moves the object rewrites the cell, so a handle stays
//! valid across collections; dropping the last clone of a handle drops its
//! root.

use offload_heap::Ref;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// A reference the collector keeps alive and updates when the object
/// moves: what a handle holds instead of a bare [`Ref`]. Clones share the
/// cell. A `Ref` read from one ([`Root::get`]) is valid until the next
/// collection; keep the `Root` (or the handle) to keep the object.
#[derive(Clone)]
pub struct Root(Arc<AtomicU32>);

impl Root {
    /// The reference now (valid until the next collection).
    pub fn get(&self) -> Ref {
        Ref(self.0.load(Ordering::Acquire))
    }

    /// Whether it is null.
    pub fn is_null(&self) -> bool {
        self.get().is_null()
    }

    /// Byte offset of the object's header now (see [`Ref::byte_offset`]).
    pub fn byte_offset(&self) -> usize {
        self.get().byte_offset()
    }

    /// The handle's identity: the same for its clones, different for
    /// every other cell while this one lives (launches in flight are
    /// ordered by the arrays they capture, `runtime::inflight`).
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// The null reference: no object to keep, and in no table.
    pub(crate) fn null() -> Root {
        Root(Arc::new(AtomicU32::new(0)))
    }
}

/// Two roots are equal when they refer to the same object now.
impl PartialEq for Root {
    fn eq(&self, other: &Root) -> bool {
        self.get() == other.get()
    }
}

/// `Root(@0x…)`, or `Root(null)`: the object's byte offset now.
impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            r if r.is_null() => write!(f, "Root(null)"),
            r => write!(f, "Root(@{:#x})", r.byte_offset()),
        }
    }
}

/// The runtime's table of roots: a weak pointer per live handle cell.
#[derive(Debug, Default)]
pub(crate) struct RootTable {
    cells: Mutex<Vec<Weak<AtomicU32>>>,
    /// Table length after the last prune: the next push that doubles it
    /// prunes again, so dropped handles cost amortized O(1).
    pruned_at: std::sync::atomic::AtomicUsize,
}

impl RootTable {
    /// A root for `r`, in the table unless null. The caller must hold off
    /// collections until it has the root (a running worker, see
    /// `crate::gc`), or `r` may have moved.
    pub(crate) fn root(&self, r: Ref) -> Root {
        let cell = Arc::new(AtomicU32::new(r.0));
        if !r.is_null() {
            let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
            cells.push(Arc::downgrade(&cell));
            let at = self.pruned_at.load(Ordering::Relaxed);
            if cells.len() >= 2 * at.max(64) {
                cells.retain(|w| w.strong_count() > 0);
                self.pruned_at.store(cells.len(), Ordering::Relaxed);
            }
        }
        Root(cell)
    }

    /// Handles alive now.
    pub(crate) fn live(&self) -> usize {
        let cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells.iter().filter(|w| w.strong_count() > 0).count()
    }

    /// Visit every live root's cell (at a safepoint: a collection reads and
    /// rewrites them), dropping the dead ones.
    pub(crate) fn visit(&self, f: &mut dyn FnMut(&mut u32)) {
        let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        cells.retain(|w| match w.upgrade() {
            Some(cell) => {
                let mut r = cell.load(Ordering::Acquire);
                f(&mut r);
                cell.store(r, Ordering::Release);
                true
            }
            None => false,
        });
        self.pruned_at.store(cells.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_handles_leave_the_table_and_live_ones_are_updated() {
        let t = RootTable::default();
        let a = t.root(Ref(10));
        let b = a.clone();
        let c = t.root(Ref(20));
        let n = t.root(Ref::NULL);
        assert!(n.is_null());
        drop(c);
        let mut seen = Vec::new();
        t.visit(&mut |r| {
            seen.push(*r);
            *r += 1;
        });
        assert_eq!(
            seen,
            [10],
            "the dropped root is gone, null is not in the table"
        );
        assert_eq!(b.get(), Ref(11), "clones share the cell");
        assert_eq!(t.live(), 1);
        for i in 0..1000 {
            drop(t.root(Ref(i + 2)));
        }
        assert!(
            t.cells.lock().unwrap().len() < 200,
            "dead cells are pruned as it grows"
        );
    }
}
