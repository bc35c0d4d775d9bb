//! The heap chunks a launch may touch: those of the arrays of numbers its
//! kernel captures, when that is all it can reach. A kernel that
//! allocates nothing, sums into no copies and captures only arrays of
//! numbers and numbers reads and writes nothing else of the heap: its
//! accesses are bounds-checked indexings of those arrays. The CUDA device
//! shares a GPU between rounds with disjoint footprints and registers a
//! split part's footprint with the heap's twins (`cuda/share.rs`); the
//! CPU device's part of a split launch marks only its footprint written
//! when its raw image drops (`cpu/launch.rs`), so that the GPUs' next
//! launches are not sent the rest of the heap again.

use crate::env::KernelCall;
use crate::error::OffloadError;
use offload_heap::layout::Ref;
use offload_heap::resident::CHUNK_BYTES;
use offload_ir::{Elem, Type};
use std::ops::Range;

/// The chunks a launch may touch, as sorted, disjoint runs of chunk
/// numbers.
pub(crate) type Footprint = Vec<Range<usize>>;

/// The footprint of `call` (see the module docs) when its kernel
/// `allocates` nothing and it reaches nothing but its arrays of numbers;
/// `None` otherwise (it may touch any chunk). `bytes_of` gives the size of
/// the array at a reference.
pub(crate) fn of_call(
    call: &KernelCall<'_>,
    allocates: bool,
    bytes_of: impl FnMut(Ref) -> Result<u64, OffloadError>,
) -> Result<Option<Footprint>, OffloadError> {
    if allocates {
        return Ok(None);
    }
    of_captures(call, bytes_of)
}

/// The chunks of the arrays of numbers `call` captures, when it captures
/// nothing else and sums into no copies (`None` otherwise). A kernel that
/// allocates besides also touches the objects it makes, which are its
/// own: a GPU part of a split launch adds its device eden's edges
/// (`cuda/grid.rs`).
pub(crate) fn of_captures(
    call: &KernelCall<'_>,
    mut bytes_of: impl FnMut(Ref) -> Result<u64, OffloadError>,
) -> Result<Option<Footprint>, OffloadError> {
    if call.copies.is_some() {
        return Ok(None);
    }
    let f = call.prog.verified().func(call.kernel);
    // The kernel's parameters after the workitem index are its captures.
    let params = f.params().get(1..).unwrap_or(&[]);
    let mut runs = Vec::new();
    for (p, raw) in params.iter().zip(call.capture_values()) {
        match p.ty {
            Type::Array(Elem::I32 | Elem::I64 | Elem::F32 | Elem::F64, 1) => {
                let r = Ref(raw as u32);
                if r.is_null() {
                    continue;
                }
                let bytes = bytes_of(r)?;
                let at = r.byte_offset();
                runs.push(at / CHUNK_BYTES..(at + bytes as usize).div_ceil(CHUNK_BYTES));
            }
            Type::I32 | Type::I64 | Type::F32 | Type::F64 => {}
            _ => return Ok(None),
        }
    }
    Ok(Some(normalize(runs)))
}

/// The bytes of the captured array at `r`, from its header as read
/// (`Heap::header`, or `Heap::peek_header` where fetching the chunk would
/// cost a copy from a device).
pub(crate) fn array_bytes(
    header: Result<offload_heap::layout::Header, offload_heap::HeapError>,
    r: Ref,
) -> Result<u64, OffloadError> {
    header
        .ok()
        .and_then(offload_heap::layout::Header::size)
        .ok_or_else(|| {
            OffloadError::Setup(format!(
                "a captured array at word {} has no readable header",
                r.0
            ))
        })
}

/// The sorted, merged runs of `runs`.
pub(crate) fn normalize(mut runs: Vec<Range<usize>>) -> Footprint {
    runs.retain(|r| r.start < r.end);
    runs.sort_by_key(|r| r.start);
    let mut out: Footprint = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}
