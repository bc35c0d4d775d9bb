//! `offload-heap`: the managed heap that device code and the host share.
//!
//! One contiguous region is reserved at the heap's maximum size and committed
//! as it grows ([`region`]). References are 32-bit word offsets from its base,
//! so one heap image is valid on host and device ([`layout`]). Eden is carved
//! into TLABs by CAS; TLAB slots are shared by groups of concurrent allocators
//! with Sumatra's designated-refiller protocol ([`tlab`]); the policy knob and
//! the per-launch slots live in [`alloc`], where each worker of a shared
//! TLAB bumps an allocation buffer of its own taken from it. Carved memory reads as zero, a
//! launch whose objects all died with it hands them back
//! ([`Allocator::reclaim`]), and the heap walks and verifies object by
//! object ([`Heap::walk`], [`Heap::verify`]); the collector ([`gc`],
//! [`Heap::collect`]) frees what no root reaches and slides the rest down,
//! so eden's top comes back down to the live data. Objects are placed by
//! class on pages whose tag names it, so compiled code finds a receiver's
//! class from its reference ([`pages`]). When a device keeps a
//! copy of the heap, this crate alone keeps the two images coherent
//! ([`resident`]): every accessor fetches what a device wrote, and code
//! that touches the heap's bytes directly gets them only through
//! [`Heap::raw_image`], which brings the host's image up to date first and
//! marks it written when dropped.
//!
//! ```
//! use offload_heap::{AllocPolicy, Allocator, Heap, HeapConfig, layout::Header};
//! use offload_ir::Elem;
//!
//! let heap = Heap::new(HeapConfig { initial: 1 << 20, max: 64 << 20, ..HeapConfig::default() })?;
//! let alloc = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 2 }, 4);
//! let at = alloc.alloc(0, Header::Array { elem: Elem::I32, dims: 1, len: 10 }).unwrap();
//! assert_eq!(heap.load32(at as usize * 8 + 8)?, 0); // zeroed
//! drop(alloc); // retires the TLABs
//! let stats = heap.walk(|_, _| {})?;
//! assert_eq!(stats.arrays, 1);
//! # Ok::<(), offload_heap::HeapError>(())
//! ```

#![deny(missing_docs)]

pub mod alloc;
pub mod gc;
pub mod heap;
pub mod layout;
pub mod pages;
mod placement;
pub mod region;
pub mod resident;
mod sync;
pub mod tlab;
mod twins;

pub use alloc::{AllocPolicy, AllocStats, Allocator};
pub use gc::{GcStats, Roots};
pub use heap::{
    ClassShape, Heap, HeapConfig, HeapError, HeapMark, MAX_HEAP_BYTES, MIN_HEAP_BYTES, WalkStats,
};
pub use layout::{Header, Ref};
pub use pages::{PageKind, PageStats, PageTable};
pub use resident::{MAX_MIRRORS, Mirror, MirrorId, RawImage, ResidencyStats};
pub use tlab::{AllocFailure, Eden, FAILED, RefillFault, SharedTlab};
pub use twins::{SendChunks, TwinMode};
