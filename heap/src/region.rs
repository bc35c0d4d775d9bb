//! The heap's memory: one contiguous region, reserved at its maximum size and
//! committed as it grows. This is the only module that touches raw memory.
//!
//! Every access goes through an atomic (relaxed unless the caller asks for
//! more): kernels may race on heap data, as Java programs may, and racy plain
//! accesses would be undefined behaviour in Rust. On x86-64 and AArch64 a relaxed
//! atomic load or store is an ordinary move.

use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// A reserved address range with a committed (readable, writable, zeroed)
/// prefix.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    reserved: usize,
    committed: AtomicUsize,
    grow_lock: Mutex<()>,
}

// SAFETY: the region owns its mapping; all access to the memory goes through
// atomics, so sharing it between threads is sound.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// The alignment of the reservation and the unit of commitment (below the
/// reservation's end): a transparent huge page on x86-64 and AArch64 with
/// 4 KiB pages, and a multiple of the page size everywhere offload runs.
pub const HUGE_PAGE: usize = 2 << 20;

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

impl Region {
    /// Reserve `max` bytes of address space and commit the first `initial`.
    ///
    /// The reservation starts on a [`HUGE_PAGE`] boundary and asks the
    /// kernel for transparent huge pages (`MADV_HUGEPAGE`; only advice:
    /// where the system has them off, it has no effect), and memory is
    /// committed in whole huge pages (but for small heaps), so that each
    /// fault in it maps 2 MiB.
    /// Kernels stream through arrays of megabytes: on 4 KiB pages, saxpy over
    /// 2^20 elements ran at 110–125 µs per launch, and at 65 µs once the
    /// kernel had collapsed its arrays into huge pages (BENCHMARKS.md).
    pub fn reserve(max: usize, initial: usize) -> std::io::Result<Region> {
        let page = page_size();
        let max = max.div_ceil(page) * page;
        let len = max + HUGE_PAGE;
        // SAFETY: an anonymous private mapping with no address hint; the
        // result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let head = (p as usize).next_multiple_of(HUGE_PAGE) - p as usize;
        // SAFETY: `[p, p + len)` is the mapping just made; the head before
        // the aligned start and the tail after `max` bytes of it are parts of
        // it (page-aligned: `head`, `max` and `len` are multiples of the
        // page size), unmapped once, and nothing refers to them.
        let base = unsafe {
            let base = p.cast::<u8>().add(head);
            if head > 0 {
                libc::munmap(p, head);
            }
            if HUGE_PAGE > head {
                libc::munmap(base.add(max).cast(), HUGE_PAGE - head);
            }
            // Advice only: an error (huge pages compiled out) changes nothing.
            libc::madvise(base.cast(), max, libc::MADV_HUGEPAGE);
            base
        };
        let region = Region {
            base: NonNull::new(base).ok_or_else(|| std::io::Error::other("mmap returned null"))?,
            reserved: max,
            committed: AtomicUsize::new(0),
            grow_lock: Mutex::new(()),
        };
        region.grow_to(initial)?;
        Ok(region)
    }

    /// The first byte of the region.
    pub fn base_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Bytes reserved.
    pub fn reserved(&self) -> usize {
        self.reserved
    }

    /// Bytes committed: `[0, committed)` is readable and writable.
    #[inline]
    pub fn committed(&self) -> usize {
        self.committed.load(Ordering::Acquire)
    }

    /// `bytes` rounded up to the unit of commitment — a huge page when it
    /// is at least one, else a page — and capped at the reservation's end.
    fn commit_bound(&self, bytes: usize) -> usize {
        let unit = if bytes >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            page_size()
        };
        bytes.div_ceil(unit).saturating_mul(unit).min(self.reserved)
    }

    /// Commit at least `bytes`: rounded up to a huge page when that is at
    /// least one, else to a page, and capped at the reservation's end
    /// (which is only page aligned). Returns the new committed size. Fresh pages read as zero.
    pub fn grow_to(&self, bytes: usize) -> std::io::Result<usize> {
        let _guard = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.committed.load(Ordering::Acquire);
        let new = self.commit_bound(bytes);
        if new <= old {
            return Ok(old);
        }
        // SAFETY: [old, new) lies inside our reservation (new <= reserved) and
        // is page aligned; making it read-write does not affect other memory.
        let rc = unsafe {
            libc::mprotect(
                self.base.as_ptr().add(old).cast(),
                new - old,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.committed.store(new, Ordering::Release);
        Ok(new)
    }

    /// Give back what is committed above `bytes` (rounded up as
    /// [`Region::grow_to`] rounds): its pages return to the system and read
    /// as zero when committed again. Returns the new committed size.
    ///
    /// The caller guarantees that nothing reads or writes
    /// `[bytes, committed)` while this runs or afterwards until it is
    /// committed again (the heap does it at a collection, above eden's
    /// top).
    pub fn shrink_to(&self, bytes: usize) -> std::io::Result<usize> {
        let _guard = self.grow_lock.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.committed.load(Ordering::Acquire);
        let new = self.commit_bound(bytes);
        if new >= old {
            return Ok(old);
        }
        // Lower the bound first: no checked access reaches past `new` once
        // the pages go.
        self.committed.store(new, Ordering::Release);
        // SAFETY: [new, old) lies inside our reservation, is page aligned
        // (`new` is a multiple of the page size; `old` was committed so) and
        // by the caller's guarantee unused: dropping its pages and making
        // it inaccessible affects nothing else.
        let rc = unsafe {
            let at = self.base.as_ptr().add(new).cast();
            if libc::madvise(at, old - new, libc::MADV_DONTNEED) == 0 {
                libc::mprotect(at, old - new, libc::PROT_NONE)
            } else {
                -1
            }
        };
        if rc != 0 {
            // Still mapped read-write: keep it committed.
            let e = std::io::Error::last_os_error();
            self.committed.store(old, Ordering::Release);
            return Err(e);
        }
        Ok(new)
    }

    #[inline]
    fn check(&self, off: usize, size: usize) -> bool {
        off.is_multiple_of(size) && off.checked_add(size).is_some_and(|e| e <= self.committed())
    }

    /// The 32-bit cell at byte offset `off`, or `None` if it is out of the
    /// committed range or misaligned.
    #[inline]
    pub fn u32_at(&self, off: usize) -> Option<&AtomicU32> {
        if !self.check(off, 4) {
            return None;
        }
        // SAFETY: `off` is 4-aligned and `off + 4 <= committed`, so the cell is
        // inside committed, read-write memory that lives as long as `self`;
        // it is only ever accessed atomically.
        Some(unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off).cast()) })
    }

    /// The 64-bit cell at byte offset `off` (8-aligned), or `None`.
    #[inline]
    pub fn u64_at(&self, off: usize) -> Option<&AtomicU64> {
        if !self.check(off, 8) {
            return None;
        }
        // SAFETY: as in `u32_at`, with 8-byte alignment and size.
        Some(unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(off).cast()) })
    }

    /// The first `n` 32-bit cells of the region (bytes `[0, 4n)`), or
    /// `None` if they are not all committed: for the collector, which reads
    /// and updates the heap in bulk.
    pub fn u32_cells(&self, n: usize) -> Option<&[AtomicU32]> {
        if n.checked_mul(4).is_none_or(|b| b > self.committed()) {
            return None;
        }
        // SAFETY: `[0, 4n)` is inside committed, read-write memory that lives
        // as long as `self`; the base is page-aligned, so every cell is
        // 4-aligned; the memory is only ever accessed atomically.
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU32>(), n) })
    }

    /// The first `n` 64-bit cells of the region (bytes `[0, 8n)`), or `None`
    /// if they are not all committed.
    pub fn u64_cells(&self, n: usize) -> Option<&[AtomicU64]> {
        if n.checked_mul(8).is_none_or(|b| b > self.committed()) {
            return None;
        }
        // SAFETY: as in `u32_cells`, with 8-byte cells (the base is
        // page-aligned).
        Some(unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU64>(), n) })
    }
}

impl Region {
    /// The `len` bytes at byte offset `off` (inside committed memory), for
    /// one bulk copy into them.
    ///
    /// # Safety
    ///
    /// No other thread may access those bytes while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.committed()),
            "bytes [{off:#x}, +{len:#x}) outside committed memory"
        );
        // SAFETY: the range is inside committed, writable memory (checked
        // above), and by the caller's contract nobody else touches it now.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr().add(off), len) }
    }

    /// Move the `n` 8-byte words at word offset `from` down or up to word
    /// offset `to` (the two ranges may overlap), inside committed memory:
    /// one `memmove`, for the collector's slide.
    ///
    /// # Safety
    ///
    /// No other thread may access either range while this runs.
    pub(crate) unsafe fn move_words(&self, from: usize, to: usize, n: usize) {
        let end = from.max(to).checked_add(n).and_then(|e| e.checked_mul(8));
        assert!(
            end.is_some_and(|e| e <= self.committed()),
            "moving {n} words from {from:#x} to {to:#x} outside committed memory"
        );
        // SAFETY: both ranges are inside committed, writable memory (checked
        // above; the base is page-aligned, so 8-byte aligned), `ptr::copy`
        // allows them to overlap, and by the caller's contract nobody else
        // touches them now.
        unsafe {
            let base = self.base.as_ptr().cast::<u64>();
            std::ptr::copy(base.add(from), base.add(to), n);
        }
    }

    /// Zero the `len` bytes at byte offset `off` (inside committed memory).
    ///
    /// # Safety
    ///
    /// No other thread may access those bytes while this runs: the caller
    /// owns them (a range it has just carved from eden), and publishes them
    /// afterwards through a synchronizing operation.
    pub(crate) unsafe fn zero(&self, off: usize, len: usize) {
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.committed()),
            "zeroing [{off:#x}, +{len:#x}) outside committed memory"
        );
        // SAFETY: the range is inside committed, writable memory (checked
        // above), and by the caller's contract nobody else touches it now.
        unsafe { std::ptr::write_bytes(self.base.as_ptr().add(off), 0, len) };
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we own the mapping of `reserved` bytes at `base`; no
        // reference into it outlives `self` (accessors borrow `self`).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.reserved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_on_demand_and_reads_zero() {
        const MB: usize = 1 << 20;
        let r = Region::reserve(1 << 30, 1 << 16).unwrap();
        assert_eq!(r.base_ptr() as usize % HUGE_PAGE, 0, "huge-page aligned");
        assert_eq!(r.committed(), 1 << 16, "small requests: pages");
        assert!(
            r.u32_at(1 << 16).is_none(),
            "uncommitted memory is not reachable"
        );
        assert_eq!(r.u32_at(64).unwrap().load(Ordering::Relaxed), 0);
        assert_eq!(r.grow_to(5 * MB).unwrap(), 6 * MB, "large ones: huge pages");
        let cell = r.u64_at(5 * MB).unwrap();
        assert_eq!(cell.load(Ordering::Relaxed), 0);
        cell.store(7, Ordering::Relaxed);
        assert_eq!(r.u64_at(5 * MB).unwrap().load(Ordering::Relaxed), 7);
        assert!(r.u64_at(4).is_none(), "misaligned");
        assert_eq!(r.grow_to(usize::MAX / 2).unwrap(), r.reserved());
        // A reservation smaller than a huge page commits no more than it.
        let small = Region::reserve(64 << 10, 4096).unwrap();
        assert_eq!((small.reserved(), small.committed()), (64 << 10, 4096));
        assert_eq!(small.grow_to(HUGE_PAGE).unwrap(), 64 << 10);
    }
}
