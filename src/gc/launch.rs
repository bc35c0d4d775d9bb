//! The roots of the launches in flight: each registers what it holds
//! outside the heap for as long as it runs.

use offload_deopt::{DeoptMetadata, SaveArea};
use offload_heap::Allocator;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// What one launch holds that a collection must see: its captured values
/// (the reference ones are updated in place; devices read them from
/// here), its save area's records, and its allocator (whose TLABs a
/// collection retires and then resets).
pub(crate) struct LaunchRoots<'a> {
    /// The captures as the devices read them.
    pub(crate) captures: &'a [AtomicU64],
    /// Which captures are references.
    pub(crate) ref_captures: Vec<usize>,
    /// The launch's copies table (`crate::env::CopyTable`): every cell a
    /// reference.
    pub(crate) copies: &'a [AtomicU64],
    /// The save area and the metadata of the version that writes it.
    pub(crate) area: Option<(&'a SaveArea, &'a DeoptMetadata)>,
    /// The launch's allocator (a device registers it with its save area;
    /// the launch registers its captures before it picks a device).
    pub(crate) alloc: Option<&'a Allocator<'a>>,
}

impl LaunchRoots<'_> {
    /// Visit the launch's references.
    pub(crate) fn visit(&self, f: &mut dyn FnMut(&mut u32)) {
        for &i in &self.ref_captures {
            let cell = &self.captures[i];
            let mut r = cell.load(Ordering::Acquire) as u32;
            f(&mut r);
            cell.store(u64::from(r), Ordering::Release);
        }
        for cell in self.copies {
            let mut r = cell.load(Ordering::Acquire) as u32;
            f(&mut r);
            cell.store(u64::from(r), Ordering::Release);
        }
        if let Some((area, meta)) = self.area {
            // A record whose site the metadata does not know cannot be
            // replayed either: its launch fails with `CorruptSaveArea`
            // when it reads it, and the collection skips it.
            let _ = area.visit_refs(meta, f);
        }
    }
}

/// A registered launch, by address.
struct Ptr(*const LaunchRoots<'static>);

// SAFETY: the pointer is only dereferenced while its `LaunchGuard` lives
// (the guard removes it first), and `LaunchRoots` is only read through it;
// what it points to is shared data (atomics, a save area of atomics, an
// allocator of atomics) that may be read from any thread.
unsafe impl Send for Ptr {}

/// The launches in flight.
#[derive(Default)]
pub(crate) struct Registry {
    launches: Mutex<Vec<Ptr>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self
            .launches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        write!(f, "Registry({n} launches)")
    }
}

/// Keeps a launch registered; dropping it unregisters the launch.
pub(crate) struct LaunchGuard<'a> {
    registry: &'a Registry,
    ptr: *const LaunchRoots<'static>,
    _roots: PhantomData<&'a LaunchRoots<'a>>,
}

impl Drop for LaunchGuard<'_> {
    fn drop(&mut self) {
        self.registry
            .launches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|p| !std::ptr::eq(p.0, self.ptr));
    }
}

impl Registry {
    /// Register `roots` until the guard drops.
    pub(crate) fn register<'a>(&'a self, roots: &'a LaunchRoots<'a>) -> LaunchGuard<'a> {
        let p: *const LaunchRoots<'a> = roots;
        let ptr = p.cast::<LaunchRoots<'static>>();
        self.launches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Ptr(ptr));
        LaunchGuard {
            registry: self,
            ptr,
            _roots: PhantomData,
        }
    }

    /// Run `f` on every launch registered now (none can leave meanwhile).
    pub(crate) fn with_all<R>(&self, f: impl FnOnce(&[&LaunchRoots<'_>]) -> R) -> R {
        let launches = self.launches.lock().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: each pointer is registered by a live `LaunchGuard`, whose
        // drop must take this lock to remove it: while the lock is held
        // here, every one points to a live `LaunchRoots`.
        let all: Vec<&LaunchRoots<'_>> = launches.iter().map(|p| unsafe { &*p.0 }).collect();
        f(&all)
    }
}
