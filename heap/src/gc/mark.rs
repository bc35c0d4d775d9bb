//! Marking on every worker (a bit per live object and one per live word,
//! filled as it traces), and the updating of an object's references.

use super::bits::{Bits, range_words};
use crate::heap::{ClassShape, HeapError};
use crate::layout::{HEAP_START_WORDS, Header, array_elem_kind};
use crate::pages::PAGE_WORDS;
use offload_ir::Kind;
use rayon::prelude::*;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A task's stack longer than this gives half of it to a new task.
const SPLIT: usize = 1024;
/// Bitmap words per task of the passes over marked objects (2^18 heap
/// words, 2 MiB).
const CHUNK: usize = 4096;

/// What marking reads (the heap's cells up to its top, the class shapes)
/// and fills: a bit per live object start, a bit per live word, and the
/// counts of [`LiveWords`].
pub(super) struct Tracer<'a> {
    pub(super) cells: &'a [AtomicU32],
    pub(super) shapes: &'a [ClassShape],
    /// Eden's top, in words.
    pub(super) top: u32,
    pub(super) marks: Bits,
    pub(super) live: Bits,
    objects: AtomicU64,
    arrays: AtomicU64,
    words: AtomicU64,
    gaps: Mutex<Vec<u32>>,
}

/// The header of the object at word `r`, if it decodes.
#[inline]
pub(super) fn header(cells: &[AtomicU32], r: u32) -> Option<Header> {
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

impl<'a> Tracer<'a> {
    /// A tracer of the heap's `top` words (`cells`), nothing marked.
    pub(super) fn new(cells: &'a [AtomicU32], shapes: &'a [ClassShape], top: u32) -> Self {
        Tracer {
            cells,
            shapes,
            top,
            marks: Bits::new(u64::from(top)),
            live: Bits::new(u64::from(top)),
            objects: AtomicU64::new(0),
            arrays: AtomicU64::new(0),
            words: AtomicU64::new(0),
            gaps: Mutex::new(Vec::new()),
        }
    }
}

impl Tracer<'_> {
    /// Mark everything the roots reach, and every word of it live; the
    /// number of non-null roots.
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
        let (mut objects, mut arrays, mut words) = (0u64, 0u64, 0u64);
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
            self.set_live(u64::from(r), end);
            objects += 1;
            words += end - u64::from(r);
            arrays += u64::from(matches!(h, Header::Array { .. }));
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
        self.objects.fetch_add(objects, Ordering::Relaxed);
        self.arrays.fetch_add(arrays, Ordering::Relaxed);
        self.words.fetch_add(words, Ordering::Relaxed);
    }

    /// Set the live bits of words `[a, b)`, a bitmap word at a time.
    fn set_live(&self, a: u64, b: u64) {
        for (w, bits) in range_words(a, b) {
            self.live.or_word(w, bits);
        }
    }

    /// What marking counted, with the turns between pages of different
    /// tags (`pages`) read from the mark bitmap: a page's objects share its
    /// tag, so only a page's first marked object can start a turn.
    pub(super) fn counted(self, pages: &crate::pages::PageTable) -> (Bits, Bits, LiveWords) {
        let mut gaps = self.gaps.into_inner().unwrap_or_else(|e| e.into_inner());
        gaps.sort_unstable();
        let mut counted = LiveWords {
            objects: self.objects.into_inner() + gaps.len() as u64,
            arrays: self.arrays.into_inner(),
            words: self.words.into_inner() + u64::from(GAP_WORDS) * gaps.len() as u64,
            gaps,
            turns: Vec::new(),
            last_tag: None,
        };
        let per_page = (PAGE_WORDS / 64) as usize;
        for (p, first) in (0..self.marks.len()).step_by(per_page).enumerate() {
            let end = (first + per_page).min(self.marks.len());
            let Some(w) = (first..end).find(|&w| self.marks.word(w) != 0) else {
                continue;
            };
            let r = (w as u32) << 6 | self.marks.word(w).trailing_zeros();
            let tag = pages.tag(p);
            if counted.last_tag.is_some_and(|t| t != tag) {
                counted.turns.push(r);
            }
            counted.last_tag = Some(tag);
        }
        (self.marks, self.live, counted)
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
        if header(self.cells, f).is_some_and(is_colour_gap) && self.marks.test_and_set(f) {
            self.set_live(u64::from(f), u64::from(r));
            self.gaps.lock().unwrap_or_else(|e| e.into_inner()).push(f);
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

/// What marking counted ([`Tracer::counted`]).
#[derive(Default)]
pub(super) struct LiveWords {
    pub(super) objects: u64,
    /// Of them, arrays.
    pub(super) arrays: u64,
    /// Live words (colour gaps' included).
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

/// Replace every non-null reference in the marked objects that start
/// below bitmap word `to` by `fwd` of it.
pub(super) fn update_refs(
    cells: &[AtomicU32],
    shapes: &[ClassShape],
    marks: &Bits,
    to: usize,
    fwd: &(dyn Fn(u32) -> u32 + Sync),
) {
    (0..to.div_ceil(CHUNK)).into_par_iter().for_each(|c| {
        for (r, h, _) in marked(cells, marks, c * CHUNK, ((c + 1) * CHUNK).min(to)) {
            update_object(cells, shapes, r, h, fwd);
        }
    });
}

/// Reference arrays longer than this have their elements updated on
/// every worker, in pieces of this many (a ring of 100,000 references
/// held one worker for 0.3 ms of a 3 ms collection).
const SPLIT_ARRAY: usize = 16_384;

/// Replace every non-null reference in the object at `r` (header `h`) by
/// `fwd` of it.
#[inline]
pub(super) fn update_object<F: Fn(u32) -> u32 + Sync + ?Sized>(
    cells: &[AtomicU32],
    shapes: &[ClassShape],
    r: u32,
    h: Header,
    fwd: &F,
) {
    let update = |cell: usize| {
        let v = cells[cell].load(Ordering::Relaxed);
        if v != 0 {
            // A reference to what stays is not stored back: the line is
            // not written (a collection that moves little wrote back
            // every line holding a reference).
            let to = fwd(v);
            if to != v {
                cells[cell].store(to, Ordering::Relaxed);
            }
        }
    };
    if let Header::Array { elem, dims, len } = h
        && len as usize > SPLIT_ARRAY
        && array_elem_kind(elem, dims) == Kind::Ref
    {
        let first = r as usize * 2 + 2;
        (first..first + len as usize)
            .into_par_iter()
            .with_min_len(SPLIT_ARRAY)
            .for_each(update);
        return;
    }
    // Marking checked every marked object's shape.
    let _ = ref_slots(shapes, r, h, update);
}
