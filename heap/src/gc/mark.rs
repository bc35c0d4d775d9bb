//! Marking on every worker, and the passes over marked objects (their live
//! words, their references).

use super::bits::{Bits, range_words};
use crate::heap::{ClassShape, HeapError};
use crate::layout::{HEAP_START_WORDS, Header, array_elem_kind};
use offload_ir::Kind;
use rayon::prelude::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// A task's stack longer than this gives half of it to a new task.
const SPLIT: usize = 1024;
/// Bitmap words per task of the passes over marked objects (2^18 heap
/// words, 2 MiB).
const CHUNK: usize = 4096;

/// What marking reads: the heap's cells up to its top, the class shapes,
/// and the mark bitmap it fills.
pub(super) struct Tracer<'a> {
    pub(super) cells: &'a [AtomicU32],
    pub(super) shapes: &'a [ClassShape],
    pub(super) marks: Bits,
    /// Eden's top, in words.
    pub(super) top: u32,
}

/// The header of the object at word `r`, if it decodes.
#[inline]
fn header(cells: &[AtomicU32], r: u32) -> Option<Header> {
    let i = r as usize * 2;
    Header::decode(
        cells[i].load(Ordering::Relaxed),
        cells[i + 1].load(Ordering::Relaxed),
    )
}

/// Call `f` on the index (in 32-bit cells) of every reference slot of the
/// object at `r` with header `h`; an error if its class is unknown or has
/// another size.
#[inline]
fn ref_slots(
    shapes: &[ClassShape],
    r: u32,
    h: Header,
    mut f: impl FnMut(usize),
) -> Result<(), String> {
    let base = r as usize * 2;
    match h {
        Header::Object { class, size } => {
            let shape = shapes
                .get(class as usize)
                .ok_or_else(|| format!("unknown class {class}"))?;
            if shape.size != size {
                return Err(format!(
                    "class {class} has size {} but header says {size}",
                    shape.size
                ));
            }
            for &o in &shape.ref_offsets {
                f(base + o as usize / 4);
            }
        }
        Header::Array { elem, dims, len } => {
            if array_elem_kind(elem, dims) == Kind::Ref {
                for i in 0..len as usize {
                    f(base + 2 + i);
                }
            }
        }
        Header::Filler { .. } => return Err("a reference points at a filler".into()),
    }
    Ok(())
}

impl Tracer<'_> {
    /// Mark everything the roots reach; the number of non-null roots.
    pub(super) fn mark(&self, roots: &mut dyn super::Roots) -> Result<u64, HeapError> {
        let mut start = Vec::new();
        let mut count = 0u64;
        let mut bad = None;
        roots.visit(&mut |r| {
            let r = *r;
            if r == 0 {
                return;
            }
            count += 1;
            if r < HEAP_START_WORDS || r >= self.top {
                bad.get_or_insert(HeapError::Corrupt {
                    at: r,
                    what: format!("a root points at word {r}, outside the heap"),
                });
            } else if self.marks.test_and_set(r) {
                start.push(r);
            }
        });
        if let Some(e) = bad {
            return Err(e);
        }
        let err = Mutex::new(None);
        rayon::scope(|s| {
            for part in start.chunks(SPLIT / 4) {
                let (part, err) = (part.to_vec(), &err);
                s.spawn(move |s| self.trace(s, part, err));
            }
        });
        match err.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => Err(e),
            None => Ok(count),
        }
    }

    /// Trace from `stack` until it is empty, handing half of it to a new
    /// task whenever it grows past [`SPLIT`].
    fn trace<'s>(
        &'s self,
        s: &rayon::Scope<'s>,
        mut stack: Vec<u32>,
        err: &'s Mutex<Option<HeapError>>,
    ) {
        let fail = |e: HeapError| {
            let mut slot = err.lock().unwrap_or_else(|e| e.into_inner());
            slot.get_or_insert(e);
        };
        while let Some(r) = stack.pop() {
            let Some(h) = header(self.cells, r) else {
                return fail(HeapError::Corrupt {
                    at: r,
                    what: "a reference points at no object (bad header)".into(),
                });
            };
            let end = h.size().map_or(u64::MAX, |b| u64::from(r) + b.div_ceil(8));
            if end > u64::from(self.top) {
                return fail(HeapError::Corrupt {
                    at: r,
                    what: format!("{h} runs past eden's top (word {})", self.top),
                });
            }
            self.keep_colour_gap(r, h);
            let mut out_of_range = None;
            let res = ref_slots(self.shapes, r, h, |cell| {
                let v = self.cells[cell].load(Ordering::Relaxed);
                if v == 0 {
                    return;
                }
                if v < HEAP_START_WORDS || v >= self.top {
                    out_of_range = Some(v);
                } else if self.marks.test_and_set(v) {
                    stack.push(v);
                }
            });
            if let Err(what) = res {
                return fail(HeapError::Corrupt { at: r, what });
            }
            if let Some(v) = out_of_range {
                return fail(HeapError::Corrupt {
                    at: r,
                    what: format!("a reference points at word {v}, outside the heap"),
                });
            }
            if stack.len() > SPLIT {
                let half = stack.split_off(stack.len() / 2);
                s.spawn(move |s| self.trace(s, half, err));
            }
        }
    }
}

impl Tracer<'_> {
    /// A large array the host placed behind a colour gap
    /// ([`crate::alloc::Allocator::alloc_host`]) keeps its gap: the filler
    /// right before it is marked too, so that sliding moves both together
    /// and the array stays as far from the one before. (A filler of that
    /// size there that was not such a gap is kept too: harmless.)
    fn keep_colour_gap(&self, r: u32, h: Header) {
        if !matches!(h, Header::Array { .. })
            || h.size().is_none_or(|b| b < crate::alloc::COLOUR_MIN_BYTES)
            || r < HEAP_START_WORDS + GAP_WORDS
        {
            return;
        }
        let f = r - GAP_WORDS;
        if header(self.cells, f).is_some_and(is_colour_gap) {
            self.marks.test_and_set(f);
        }
    }
}

/// The marked object starts in bitmap words `[from, to)` with their size
/// in words.
fn marked(
    cells: &[AtomicU32],
    marks: &Bits,
    from: usize,
    to: usize,
) -> impl Iterator<Item = (u32, Header, u64)> {
    marks.ones(from, to).map(move |r| {
        // Marking decoded every marked header; the default never happens.
        let h = header(cells, r).unwrap_or(Header::Filler { size: 8 });
        (r, h, h.size().unwrap_or(8) / 8)
    })
}

/// Set a bit in `live` for every word of every marked object; the number
/// of objects and of words, the colour gaps, and the objects whose page
/// tag (`tag_of`, `crate::pages`) differs from the marked object's before.
pub(super) fn live_words(
    cells: &[AtomicU32],
    marks: &Bits,
    live: &Bits,
    pages: &crate::pages::PageTable,
) -> LiveWords {
    let parts: Vec<(LiveWords, Option<(u32, u32)>)> = (0..marks.len().div_ceil(CHUNK))
        .into_par_iter()
        .map(|c| {
            let mut part = LiveWords::default();
            let mut first = None;
            // The tag of the page the last object started on, read once
            // per page.
            let mut seen: Option<(u32, u32)> = None;
            // The bitmap word being filled: objects come in address order,
            // so each word is written once (an atomic or, as the chunks
            // before and after may fill its other bits).
            let mut word: Option<(usize, u64)> = None;
            let flush = |w: Option<(usize, u64)>| {
                if let Some((w, bits)) = w {
                    live.or_word(w, bits);
                }
            };
            for (r, h, size) in marked(cells, marks, c * CHUNK, ((c + 1) * CHUNK).min(marks.len()))
            {
                for (w, bits) in range_words(u64::from(r), u64::from(r) + size) {
                    match &mut word {
                        Some((cur, acc)) if *cur == w => *acc |= bits,
                        _ => flush(word.replace((w, bits))),
                    }
                }
                part.objects += 1;
                part.arrays += u64::from(matches!(h, Header::Array { .. }));
                part.words += size;
                if is_colour_gap(h) {
                    part.gaps.push(r);
                }
                let page = r >> offload_abi::pages::PAGE_SHIFT;
                let tag = match seen {
                    Some((p, t)) if p == page => t,
                    _ => {
                        let t = pages.tag_of(r);
                        seen = Some((page, t));
                        t
                    }
                };
                match part.last_tag {
                    None => first = Some((r, tag)),
                    Some(t) if t != tag => part.turns.push(r),
                    Some(_) => {}
                }
                part.last_tag = Some(tag);
            }
            flush(word);
            (part, first)
        })
        .collect();
    // In address order: the chunks are, and so is each chunk's list.
    let mut all = LiveWords::default();
    for (p, first) in parts {
        all.objects += p.objects;
        all.arrays += p.arrays;
        all.words += p.words;
        all.gaps.extend(p.gaps);
        if let Some((r, tag)) = first
            && all.last_tag.is_some_and(|t| t != tag)
        {
            all.turns.push(r);
        }
        all.turns.extend(p.turns);
        all.last_tag = p.last_tag.or(all.last_tag);
    }
    all
}

/// What [`live_words`] counted.
#[derive(Default)]
pub(super) struct LiveWords {
    pub(super) objects: u64,
    /// Of them, arrays.
    pub(super) arrays: u64,
    pub(super) words: u64,
    /// The colour gaps kept (see [`Tracer::keep_colour_gap`]), in address
    /// order: a marked filler of exactly this size is one (nothing else
    /// marks a filler).
    pub(super) gaps: Vec<u32>,
    /// The objects, in address order, whose page's tag differs from that
    /// of the marked object before them: each starts a new page where it
    /// slides (`crate::pages`).
    pub(super) turns: Vec<u32>,
    /// The tag of the last marked object's page.
    pub(super) last_tag: Option<u32>,
}

/// The words of a colour gap.
pub(super) const GAP_WORDS: u32 = (crate::alloc::COLOUR_GAP_BYTES / 8) as u32;

/// Whether a marked object with header `h` is a kept colour gap (or, at
/// marking, the filler before a large array that is one).
fn is_colour_gap(h: Header) -> bool {
    h == Header::Filler {
        size: crate::alloc::COLOUR_GAP_BYTES as u32,
    }
}

/// Replace every non-null reference in a marked object by `fwd` of it.
pub(super) fn update_refs(
    cells: &[AtomicU32],
    shapes: &[ClassShape],
    marks: &Bits,
    fwd: &(dyn Fn(u32) -> u32 + Sync),
) {
    (0..marks.len().div_ceil(CHUNK))
        .into_par_iter()
        .for_each(|c| {
            for (r, h, _) in marked(cells, marks, c * CHUNK, ((c + 1) * CHUNK).min(marks.len())) {
                // Marking checked every marked object's shape.
                let _ = ref_slots(shapes, r, h, |cell| {
                    let v = cells[cell].load(Ordering::Relaxed);
                    if v != 0 {
                        cells[cell].store(fwd(v), Ordering::Relaxed);
                    }
                });
            }
        });
}
