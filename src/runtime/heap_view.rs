//! What safe code may do with a runtime's heap: look ([`HeapView`]).
//!
//! Compiled kernels trust the heap's headers — an array's length bounds
//! its accesses, a class id picks a vtable — so a write that changed a
//! header could lead a kernel outside the heap. Safe code therefore gets
//! a view that reads (sizes, headers, words, the walk, the page table's
//! statistics) and writes only through the typed handles
//! ([`crate::Runtime::write`], [`crate::Module::set_field`], …), which
//! never touch a header. Raw access, for white-box tests, is
//! [`crate::Runtime::raw_heap`], an `unsafe fn`.

use offload_heap::{
    Header, Heap, HeapConfig, HeapError, PageStats, Ref, ResidencyStats, WalkStats,
};

/// A read-only view of a runtime's heap ([`crate::Runtime::heap`]).
///
/// It has no way to write: overwriting an array's header (its length)
/// would let a kernel index past the heap, so this does not compile:
///
/// ```compile_fail,E0599
/// let rt = offload::Runtime::new().unwrap();
/// let a = rt.new_array::<i32>(4).unwrap();
/// rt.heap().store32(a.as_ref().byte_offset() + 4, i32::MAX as u32).unwrap();
/// ```
#[derive(Clone, Copy)]
pub struct HeapView<'a>(pub(crate) &'a Heap);

impl std::fmt::Debug for HeapView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapView")
            .field("used", &self.used())
            .field("committed", &self.committed())
            .finish()
    }
}

impl<'a> HeapView<'a> {
    /// The heap's configuration (initial, maximum and TLAB sizes).
    pub fn config(&self) -> &'a HeapConfig {
        self.0.config()
    }

    /// Bytes of address space committed (the heap's memory now).
    pub fn committed(&self) -> usize {
        self.0.committed()
    }

    /// Bytes in use: eden's top (see [`Heap::used`]).
    pub fn used(&self) -> u64 {
        self.0.used()
    }

    /// The header of the object at `r`.
    pub fn header(&self, r: Ref) -> Result<Header, HeapError> {
        self.0.header(r)
    }

    /// The 32-bit word at byte offset `off`.
    pub fn load32(&self, off: usize) -> Result<u32, HeapError> {
        self.0.load32(off)
    }

    /// The 64-bit word at byte offset `off`.
    pub fn load64(&self, off: usize) -> Result<u64, HeapError> {
        self.0.load64(off)
    }

    /// Every block (objects, arrays, fillers) in address order (see
    /// [`Heap::walk`]).
    pub fn walk(&self, visit: impl FnMut(Ref, Header)) -> Result<WalkStats, HeapError> {
        self.0.walk(visit)
    }

    /// Check the page table against the headers (see
    /// [`Heap::check_pages`]).
    pub fn check_pages(&self) -> Result<(), HeapError> {
        self.0.check_pages()
    }

    /// What the pages by class hold and leave unused (see
    /// [`Heap::page_stats`]).
    pub fn page_stats(&self) -> Result<PageStats, HeapError> {
        self.0.page_stats()
    }

    /// Whether the heap has an image on a GPU.
    pub fn is_mirrored(&self) -> bool {
        self.0.is_mirrored()
    }

    /// The GPU image's coherence counts (see [`Heap::residency`]).
    pub fn residency(&self) -> ResidencyStats {
        self.0.residency()
    }

    /// Whether two views show the same heap.
    pub fn same_as(&self, other: &HeapView<'_>) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}
