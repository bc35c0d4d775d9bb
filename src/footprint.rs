//! The heap chunks a launch may touch: those of the arrays of numbers its
//! kernel captures, when that is all it can reach. A kernel that
//! allocates nothing, sums into no copies and captures only arrays of
//! numbers and numbers reads and writes nothing else of the heap: its
//! accesses are bounds-checked indexings of those arrays — and of an array
//! it reaches only at the workitem's own element (`out[i]`, `x[i]`:
//! `offload_ir::own`), only the chunks of the launch's range's elements,
//! and of one it only reads, nothing written. The CUDA device shares a GPU
//! between rounds with disjoint footprints, sends a round only the stale
//! chunks of its footprint, and registers a split part's footprint with
//! the heap's twins (`cuda/share.rs`); the CPU device fetches only the
//! chunks its launch reads or writes and marks only those it writes when
//! its raw image drops (`cpu/launch.rs`), so that the GPUs' next launches
//! are not sent the rest of the heap, what it only read, or the other
//! parts' elements again.

use crate::env::KernelCall;
use crate::error::OffloadError;
use offload_heap::layout::Ref;
use offload_heap::resident::CHUNK_BYTES;
use offload_ir::{Elem, Type};
use std::ops::Range;

/// The chunks a launch may touch, as sorted, disjoint runs of chunk
/// numbers.
pub(crate) type Footprint = Vec<Range<usize>>;

/// The footprint of a launch of `call` over `range` (see the module docs)
/// when its kernel `allocates` nothing and it reaches nothing but its
/// arrays of numbers: the chunks it reads or writes ([`touched_over`]);
/// `None` otherwise (it may touch any chunk). `bytes_of` gives the size of
/// the array at a reference.
pub(crate) fn of_call(
    call: &KernelCall<'_>,
    allocates: bool,
    range: &Range<i64>,
    bytes_of: impl FnMut(Ref) -> Result<u64, OffloadError>,
) -> Result<Option<Footprint>, OffloadError> {
    if allocates {
        return Ok(None);
    }
    Ok(touched_over(call, range, bytes_of)?
        .map(|(reads, writes)| normalize(reads.into_iter().chain(writes).collect())))
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

/// The chunks a launch of `call` over `range` reads and those it writes
/// (see [`of_captures`] for when they are known): of an array the kernel
/// reaches only at the workitem's own element (`offload_ir::own`), the
/// chunks of the range's elements; of one it reaches anywhere, all of its
/// chunks; of one it never reads or never writes, none that way; and the
/// chunk of every array's header, read (its length).
/// `bytes_of` gives the size of the array at a reference. A range past
/// `i32`'s (where a narrowed workitem number is another element) counts
/// every access as anywhere.
pub(crate) fn touched_over(
    call: &KernelCall<'_>,
    range: &Range<i64>,
    mut bytes_of: impl FnMut(Ref) -> Result<u64, OffloadError>,
) -> Result<Option<(Footprint, Footprint)>, OffloadError> {
    use offload_heap::layout::{HEADER_BYTES, array_elem_kind, kind_size};
    use offload_ir::own::{Access, ParamAccess};
    if call.copies.is_some() {
        return Ok(None);
    }
    let f = call.prog.verified().func(call.kernel);
    let access = call
        .prog
        .analysis(call.kernel)
        .map(|a| a.param_access.as_slice())
        .unwrap_or_default();
    let narrow = range.start >= 0 && range.end <= i64::from(i32::MAX);
    let params = f.params().get(1..).unwrap_or(&[]);
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    for (p, (local, raw)) in params.iter().zip(call.capture_values()).enumerate() {
        let elem = match local.ty {
            Type::Array(e @ (Elem::I32 | Elem::I64 | Elem::F32 | Elem::F64), 1) => e,
            Type::I32 | Type::I64 | Type::F32 | Type::F64 => continue,
            _ => return Ok(None),
        };
        let r = Ref(raw as u32);
        if r.is_null() {
            continue;
        }
        let bytes = bytes_of(r)? as usize;
        let at = r.byte_offset();
        let whole = at / CHUNK_BYTES..(at + bytes).div_ceil(CHUNK_BYTES);
        // The range's elements (of at most as many as the bytes hold:
        // their length rounded up to a word).
        let own = || {
            let size = kind_size(array_elem_kind(elem, 1)) as usize;
            let data = at + HEADER_BYTES as usize;
            let cap = (bytes.saturating_sub(HEADER_BYTES as usize) / size) as i64;
            let (lo, hi) = (range.start.clamp(0, cap), range.end.clamp(0, cap));
            let (a, b) = (data + lo as usize * size, data + hi as usize * size);
            a / CHUNK_BYTES..b.div_ceil(CHUNK_BYTES)
        };
        // Its header, which bounds checks and `array.len` read.
        reads.push(whole.start..whole.start + 1);
        let a = access.get(p + 1).copied().unwrap_or(ParamAccess::ANY);
        for (how, runs) in [(a.reads, &mut reads), (a.writes, &mut writes)] {
            match how {
                Access::None => {}
                Access::Own if narrow => runs.push(own()),
                _ => runs.push(whole.clone()),
            }
        }
    }
    Ok(Some((normalize(reads), normalize(writes))))
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
