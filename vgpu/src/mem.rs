//! The virtual GPU's memory: allocations the simulator owns (device memory,
//! pinned host memory mapped for the device, a kernel's parameter buffer,
//! a block's shared memory, a thread's local memory, a module's data), and
//! the checked access every load, store and atomic goes through.
//!
//! Device addresses are the host addresses of the backing allocations (as
//! with unified virtual addressing on a real GPU, a mapped host pointer is
//! also its device pointer). An address is usable only inside a live
//! allocation of a space the instruction may reach: anything else is an
//! illegal address, and an access not aligned to its size is misaligned —
//! the errors a GPU gives, raised here where a GPU would often corrupt
//! memory silently.
//!
//! All accesses are atomic operations on the backing memory, so that the
//! host may write mapped memory (the control word) while a kernel runs.

use std::alloc::Layout;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

/// What an allocation is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Device memory (`cuMemAlloc`).
    Device,
    /// Pinned host memory mapped into the device's address space.
    HostMapped,
    /// A module's `.global`/`.const` data.
    ModuleData,
    /// A kernel launch's parameter buffer.
    Param,
    /// One block's shared memory (the block's index).
    Shared(u32),
    /// One thread's local memory (the thread's index in the grid).
    Local(u32),
}

/// Zeroed memory owned by the simulator, 256-byte aligned.
#[derive(Debug)]
pub struct Backing {
    /// The first byte, [`ALIGN`]-aligned inside the raw allocation.
    ptr: *mut u8,
    len: usize,
    /// The raw allocation (`len + ALIGN` bytes, 16-aligned).
    raw: *mut u8,
}

// SAFETY: the pointer is an owned heap allocation; every access to its
// bytes from the simulator is atomic, and the driver copies into it only
// as CUDA's API allows (the caller orders copies and kernels).
unsafe impl Send for Backing {}
// SAFETY: as above.
unsafe impl Sync for Backing {}

/// The alignment of every allocation (as `cuMemAlloc` guarantees).
pub const ALIGN: usize = 256;

impl Backing {
    /// A zeroed allocation of `len` bytes (at least one), or `None` when
    /// the host cannot provide it.
    pub fn new(len: usize) -> Option<Arc<Backing>> {
        // A small alignment lets the allocator hand out fresh zero pages
        // for large blocks (calloc) instead of writing zeros over them, as
        // an over-aligned zeroed allocation does; the 256-byte boundary is
        // found inside.
        let layout = Layout::from_size_align(len.checked_add(ALIGN)?, 16).ok()?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        if raw.is_null() {
            return None;
        }
        let pad = (raw as usize).next_multiple_of(ALIGN) - raw as usize;
        // SAFETY: `pad < ALIGN`, so `[pad, pad + len)` is inside the
        // `len + ALIGN` bytes allocated.
        let ptr = unsafe { raw.add(pad) };
        Some(Arc::new(Backing { ptr, len, raw }))
    }

    /// The address of the first byte.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the allocation is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `src` into the allocation at `offset`.
    ///
    /// # Panics
    ///
    /// If the range is outside the allocation (the driver checks first).
    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset + src.len() <= self.len, "copy inside the allocation");
        // SAFETY: the range is inside the allocation (asserted); `src` is a
        // separate host buffer, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), src.len()) }
    }

    /// Copies from the allocation at `offset` into `dst`.
    ///
    /// # Panics
    ///
    /// If the range is outside the allocation (the driver checks first).
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset + dst.len() <= self.len, "copy inside the allocation");
        // SAFETY: as for `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), dst.as_mut_ptr(), dst.len()) }
    }

    /// Fills `len` bytes at `offset` with `byte`.
    ///
    /// # Panics
    ///
    /// If the range is outside the allocation.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) {
        assert!(offset + len <= self.len, "fill inside the allocation");
        // SAFETY: the range is inside the allocation (asserted).
        unsafe { std::ptr::write_bytes(self.ptr.add(offset), byte, len) }
    }
}

impl Drop for Backing {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len + ALIGN, 16).expect("made by new");
        // SAFETY: `raw` was allocated by `new` with this layout; freed once.
        unsafe { std::alloc::dealloc(self.raw, layout) }
    }
}

/// A live allocation, as a launch sees it.
#[derive(Clone, Debug)]
pub struct Region {
    /// What it is.
    pub kind: Kind,
    /// Its memory (kept alive by the launch while it runs).
    pub backing: Arc<Backing>,
}

impl Region {
    fn base(&self) -> u64 {
        self.backing.addr()
    }
}

/// Why an access failed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Outside every allocation the instruction may reach.
    Illegal,
    /// Not aligned to the access size.
    Misaligned,
}

/// The allocations a launch may touch, sorted by address.
#[derive(Clone, Debug, Default)]
pub struct MemMap {
    regions: Vec<Region>,
}

impl MemMap {
    /// A map of `regions`.
    pub fn new(mut regions: Vec<Region>) -> MemMap {
        regions.sort_by_key(Region::base);
        MemMap { regions }
    }

    /// Adds a region.
    pub fn add(&mut self, r: Region) {
        let at = self.regions.partition_point(|x| x.base() < r.base());
        self.regions.insert(at, r);
    }

    /// The region holding `[addr, addr + size)`, if the whole range is in
    /// one allocation.
    pub fn find(&self, addr: u64, size: u64) -> Option<&Region> {
        let i = self.regions.partition_point(|r| r.base() <= addr);
        let r = self.regions.get(i.checked_sub(1)?)?;
        let end = r.base() + r.backing.len() as u64;
        (addr.checked_add(size)? <= end).then_some(r)
    }

    /// Checks an access of `size` bytes at `addr` by `who` (block, thread)
    /// under `allowed`, and returns the host pointer.
    pub fn check(
        &self,
        addr: u64,
        size: u64,
        allowed: impl Fn(Kind) -> bool,
    ) -> Result<*mut u8, Fault> {
        let r = self.find(addr, size).ok_or(Fault::Illegal)?;
        if !allowed(r.kind) {
            return Err(Fault::Illegal);
        }
        if !addr.is_multiple_of(size) {
            return Err(Fault::Misaligned);
        }
        Ok(addr as *mut u8)
    }
}

/// Loads `size` bytes (1, 2, 4 or 8) at `p`, zero-extended.
///
/// # Safety
///
/// `p` must come from [`MemMap::check`] for this size, on a map whose
/// backings are alive.
pub unsafe fn load(p: *mut u8, size: u64) -> u64 {
    // SAFETY: `p` is inside a live allocation and aligned to `size`
    // (checked); atomics of that size may alias the bytes.
    unsafe {
        match size {
            1 => u64::from((*(p as *const AtomicU8)).load(Ordering::SeqCst)),
            2 => u64::from((*(p as *const AtomicU16)).load(Ordering::SeqCst)),
            4 => u64::from((*(p as *const AtomicU32)).load(Ordering::SeqCst)),
            _ => (*(p as *const AtomicU64)).load(Ordering::SeqCst),
        }
    }
}

/// Stores the low `size` bytes of `v` at `p`.
///
/// # Safety
///
/// As for [`load`].
pub unsafe fn store(p: *mut u8, size: u64, v: u64) {
    // SAFETY: as for `load`.
    unsafe {
        match size {
            1 => (*(p as *const AtomicU8)).store(v as u8, Ordering::SeqCst),
            2 => (*(p as *const AtomicU16)).store(v as u16, Ordering::SeqCst),
            4 => (*(p as *const AtomicU32)).store(v as u32, Ordering::SeqCst),
            _ => (*(p as *const AtomicU64)).store(v, Ordering::SeqCst),
        }
    }
}

/// Atomically replaces the value at `p` with `f(old)` (when `Some`) and
/// returns the old value.
///
/// # Safety
///
/// As for [`load`]; `size` is 4 or 8.
pub unsafe fn rmw(p: *mut u8, size: u64, f: impl Fn(u64) -> Option<u64>) -> u64 {
    // SAFETY: as for `load`.
    unsafe {
        if size == 4 {
            let a = &*(p as *const AtomicU32);
            match a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |o| {
                f(u64::from(o)).map(|n| n as u32)
            }) {
                Ok(o) | Err(o) => u64::from(o),
            }
        } else {
            let a = &*(p as *const AtomicU64);
            match a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, f) {
                Ok(o) | Err(o) => o,
            }
        }
    }
}
