//! Twins: the version of a chunk a device's kernel started writing from,
//! kept while the host's bytes of that chunk may change under it.
//!
//! The merge of several owners ([`crate::resident`]) takes the host's
//! bytes as the version every owner started from. That holds while no host
//! code writes a chunk a kernel is writing — true of one launch on one
//! device, whose host work (replays, a safepoint's operation) runs while its
//! kernel is stopped. A launch **split over devices** breaks it: one part's
//! replays, and the fetches that merge another part's writes, change the
//! host's bytes of a chunk while a kernel on another device writes other
//! elements of it. So while a split launch runs ([`Heap::twin_mode`]), a
//! device part registers the chunks its kernel may write
//! ([`Heap::send_for_write`]), and
//!
//! * every chunk sent to it is sent **from a twin**: a copy of the host's
//!   bytes taken with host writes kept out, which is then exactly the
//!   device's image of the chunk;
//! * before the host's bytes of a registered chunk change — a host store,
//!   a fetch merging another device's writes, a raw image handed out — a
//!   twin is taken of the bytes as they are (the device's image of the
//!   chunk, less its own writes not fetched yet) if it has none;
//! * a fetch from an owner with a twin takes the bytes where its image
//!   differs from the twin, and leaves the host's other bytes (other
//!   elements written meanwhile) alone: the twin-and-diff merge of
//!   multiple-writer distributed shared memories (TreadMarks), with the
//!   twin taken lazily; the twin then becomes the bytes fetched
//!   ([`Heap::twin_advance`]), so that what the device writes after the
//!   fetch — an element set back to the value it was sent included —
//!   differs from it.
//!
//! A part registers before anything is checked for it
//! ([`Heap::send_for_write`]): a merge on another thread between the check
//! of what its device lacks and its registration would otherwise leave it
//! writing over an image older than the host's, with no twin. A fetch may
//! read a device's image while a kernel on it writes other elements (one
//! GPU's thread fetching for its own next part); the residency's marks
//! keep that device an owner ([`crate::resident`]).
//!
//! A twin goes when the device is sent the chunk again or the chunk is
//! fetched from it while it no longer writes it, and a part that ends
//! drops its twins of chunks it does not own. Twins are only ever of
//! chunks a part registered, so they take at most one copy of the
//! launch's arrays per device, and only where the host wrote beside a
//! kernel.
//!
//! Host stores in twin mode hold the **gate** shared from their twin check
//! to their store; a send for a part holds it exclusively (and the fetch
//! lock), so no host store lands between the twin a send copies and the
//! copy reaching the device. Atomic read-modify-writes are not merged
//! (each device's counter would win over the other's): a split launch
//! refuses kernels that use them.

use crate::heap::{Heap, HeapError};
use crate::resident::{CHUNK_BYTES, MirrorId};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

/// A device part's registration: the chunks its kernel may write.
#[derive(Debug)]
struct Writer {
    token: u64,
    mirror: MirrorId,
    chunks: Vec<Range<usize>>,
}

#[derive(Debug, Default)]
struct State {
    writers: Vec<Writer>,
    /// By (mirror, chunk): the device's image of the chunk before its own
    /// writes.
    twins: HashMap<(MirrorId, usize), Box<[u8]>>,
    next: u64,
    /// The raw images handed out in twin mode and not dropped.
    raws: Vec<Raw>,
}

/// A raw image handed out in twin mode and not dropped.
#[derive(Debug)]
struct Raw {
    token: u64,
    /// The chunks its compiled host code may write without a mark until
    /// it drops (`None`: any).
    writes: Option<Vec<Range<usize>>>,
    /// [`Heap::top_lowered`] when it was handed out: after a collection,
    /// which moves what it writes, it may write any chunk.
    lowered: u64,
}

impl State {
    /// Whether a registered part on `m` may write chunk `c`.
    fn writes(&self, m: MirrorId, c: usize) -> bool {
        self.writers
            .iter()
            .any(|w| w.mirror == m && w.chunks.iter().any(|r| r.contains(&c)))
    }

    /// The mirrors registered for chunk `c` without a twin of it.
    fn untwinned(&self, c: usize) -> impl Iterator<Item = MirrorId> + '_ {
        self.writers
            .iter()
            .filter(move |w| w.chunks.iter().any(|r| r.contains(&c)))
            .map(|w| w.mirror)
            .filter(move |&m| !self.twins.contains_key(&(m, c)))
    }
}

/// The twins of a heap (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Twins {
    /// Split launches running: twin mode while non-zero.
    on: AtomicUsize,
    /// Twins kept now (the fetch's fast path skips the map when zero).
    kept: AtomicUsize,
    /// Raw images handed out in twin mode and not dropped
    /// ([`State::raws`]; the send's fast path skips the map when zero).
    raw: AtomicUsize,
    gate: RwLock<()>,
    state: Mutex<State>,
}

impl Twins {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    pub(crate) fn on(&self) -> bool {
        self.on.load(Ordering::Acquire) != 0
    }

    #[inline]
    fn any(&self) -> bool {
        self.kept.load(Ordering::Acquire) != 0
    }
}

/// Twin mode for the life of a split launch ([`Heap::twin_mode`]).
#[derive(Debug)]
pub struct TwinMode<'a> {
    heap: &'a Heap,
}

impl Drop for TwinMode<'_> {
    fn drop(&mut self) {
        self.heap.twins.on.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How [`Heap::send_for_write`] sends: each chunk's byte offset and
/// bytes, returning once the device has them all.
pub type SendChunks<'a> = dyn FnMut(&[(usize, &[u8])]) -> Result<(), String> + 'a;

/// What a host store holds from its twin check to its store (nothing
/// outside twin mode).
pub(crate) type StoreGate<'a> = Option<RwLockReadGuard<'a, ()>>;

/// A device's bytes of chunk `c` merged over the host's: every byte where
/// `theirs` differs from `base` takes `theirs`. Written byte by byte
/// through the pointer: host code may be writing other elements of the
/// chunk meanwhile (a part's replays, compiled code on a raw image).
///
/// # Safety
///
/// `dst` must point to `theirs.len()` committed bytes of the heap.
pub(crate) unsafe fn merge_into(dst: *mut u8, theirs: &[u8], base: &[u8]) {
    for (i, (&t, &b)) in theirs.iter().zip(base).enumerate() {
        if t != b {
            // SAFETY: `i < theirs.len()`, inside the caller's bytes; a
            // byte store never tears, and the other writers write other
            // bytes (or race in the program).
            unsafe { dst.add(i).write_volatile(t) };
        }
    }
}

impl Heap {
    /// Twin mode until the guard drops: host stores and fetches keep the
    /// twins of the chunks device parts write (module `twins` docs). A
    /// launch split over devices holds it from before its first part to
    /// after its last.
    pub fn twin_mode(&self) -> TwinMode<'_> {
        self.twins.on.fetch_add(1, Ordering::AcqRel);
        TwinMode { heap: self }
    }

    /// The host's bytes of chunk `c` (clamped to committed memory).
    fn chunk_copy(&self, c: usize) -> Box<[u8]> {
        let start = c * CHUNK_BYTES;
        let end = ((c + 1) * CHUNK_BYTES).min(self.committed());
        if start >= end {
            return Box::new([]);
        }
        // SAFETY: committed bytes, read once; a host store racing the copy
        // is kept out by the gate where it matters (the callers').
        unsafe { std::slice::from_raw_parts(self.base_ptr().add(start), end - start) }.into()
    }

    fn keep_twin(&self, st: &mut State, m: MirrorId, c: usize, bytes: Box<[u8]>) {
        if st.twins.insert((m, c), bytes).is_none() {
            self.twins.kept.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn drop_twin(&self, st: &mut State, m: MirrorId, c: usize) {
        if st.twins.remove(&(m, c)).is_some() {
            self.twins.kept.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Before the host's bytes of `chunks` change: a twin for every part
    /// registered for one of them that has none.
    pub(crate) fn twin_before_change(&self, chunks: Range<usize>) {
        let mut st = self.twins.lock();
        if st.writers.is_empty() {
            return;
        }
        for c in chunks {
            let want: Vec<MirrorId> = st.untwinned(c).collect();
            if want.is_empty() {
                continue;
            }
            let bytes = self.chunk_copy(c);
            for m in want {
                self.keep_twin(&mut st, m, c, bytes.clone());
            }
        }
    }

    /// Before a host store to `[at, at + len)`: in twin mode, the gate held
    /// shared until the store is done, and the twins the store needs.
    #[inline]
    pub(crate) fn store_gate(&self, at: usize, len: usize) -> StoreGate<'_> {
        if !self.twins.on() {
            return None;
        }
        let g = self
            .twins
            .gate
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        self.twin_before_change(crate::resident::chunks_of(at, at.saturating_add(len)));
        Some(g)
    }

    /// Before a raw image is handed out in twin mode: twins of every chunk
    /// a part is registered for among those its compiled host code may
    /// write (`writes`; `None`: any) — it will write them with no store to
    /// hook — and the image counted until it drops
    /// ([`Heap::raw_dropped`]): a part sent chunks meanwhile is sent all
    /// of its chunks among those. Its token, when it was counted.
    pub(crate) fn twin_for_raw(&self, writes: Option<&[Range<usize>]>) -> Option<u64> {
        if !self.twins.on() {
            return None;
        }
        let _g = self
            .twins
            .gate
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let (token, chunks) = {
            let mut st = self.twins.lock();
            st.next += 1;
            let token = st.next;
            st.raws.push(Raw {
                token,
                writes: writes.map(<[_]>::to_vec),
                lowered: self.top_lowered(),
            });
            self.twins.raw.fetch_add(1, Ordering::AcqRel);
            let chunks: Vec<Range<usize>> = st
                .writers
                .iter()
                .flat_map(|w| w.chunks.iter().cloned())
                .flat_map(|r| within(r, writes))
                .collect();
            (token, chunks)
        };
        for r in chunks {
            self.twin_before_change(r);
        }
        Some(token)
    }

    /// The raw image [`Heap::twin_for_raw`] counted as `token` dropped
    /// (after it marked what it may have written).
    pub(crate) fn raw_dropped(&self, token: u64) {
        let mut st = self.twins.lock();
        st.raws.retain(|r| r.token != token);
        self.twins.raw.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether mirror `m` keeps a twin of chunk `c`.
    pub(crate) fn has_twin(&self, m: MirrorId, c: usize) -> bool {
        self.twins.any() && self.twins.lock().twins.contains_key(&(m, c))
    }

    /// Mirror `m`'s twin of chunk `c` from byte `from` on, over `dst` as
    /// far as it goes (a twin taken when less of the heap was committed
    /// covers less of the chunk: `dst` keeps its bytes beyond it).
    pub(crate) fn twin_over(&self, m: MirrorId, c: usize, from: usize, dst: &mut [u8]) {
        if !self.twins.any() {
            return;
        }
        if let Some(t) = self.twins.lock().twins.get(&(m, c))
            && t.len() > from
        {
            let k = (t.len() - from).min(dst.len());
            dst[..k].copy_from_slice(&t[from..from + k]);
        }
    }

    /// Owner `m`'s bytes `theirs` of chunk `c` from byte `from` on were
    /// merged into the host's: its twin of the chunk, if it keeps one,
    /// becomes those bytes there. A device that goes on writing after a
    /// fetch (a part's next round, or its kernel still running) then
    /// merges only what it wrote since: against the older twin, an
    /// element it set back to the twin's value (`3.5`, then `-4`, then
    /// `3.5` again) would not differ, and the host would keep the `-4`
    /// the first fetch brought.
    pub(crate) fn twin_advance(&self, m: MirrorId, c: usize, from: usize, theirs: &[u8]) {
        if !self.twins.any() {
            return;
        }
        let mut st = self.twins.lock();
        let Some(t) = st.twins.get_mut(&(m, c)) else {
            return;
        };
        if t.len() < from {
            // Taken when less of the heap was committed, and not reaching
            // the fetched bytes: the bytes between are not known here.
            return;
        }
        let end = from + theirs.len();
        if t.len() < end {
            let mut grown = std::mem::take(t).into_vec();
            grown.resize(end, 0);
            *t = grown.into_boxed_slice();
        }
        t[from..end].copy_from_slice(theirs);
    }

    /// Chunk `c` was fetched from the owners `own`: their twins of it go
    /// unless they still write it.
    pub(crate) fn twins_fetched(&self, c: usize, own: u8) {
        if !self.twins.any() {
            return;
        }
        let mut st = self.twins.lock();
        for k in 0..crate::resident::MAX_MIRRORS {
            let m = MirrorId::from_index(k);
            if own & (1 << k) != 0 && !st.writes(m, c) {
                self.drop_twin(&mut st, m, c);
            }
        }
    }

    /// Chunk `c` was sent to `m`: its image is the host's bytes now.
    pub(crate) fn twin_sent(&self, m: MirrorId, c: usize) {
        if !self.twins.any() {
            return;
        }
        let mut st = self.twins.lock();
        self.drop_twin(&mut st, m, c);
    }

    /// For a part of a split launch on device `m` whose kernel may write
    /// `chunks` (sorted, disjoint runs): register it (`token` `None`: a new
    /// part; else the part's token, its chunks replaced) and send it the
    /// stale chunks among them, each from a twin, through `send` (each
    /// chunk's byte offset and bytes; it returns once the device has
    /// them). With host writes kept out throughout. The chunks `fresh`
    /// (a run among `chunks`: those wholly inside the device eden its
    /// kernel allocates in now, which the device zeroes and no one else
    /// writes) are never sent: the host's bytes there are not the
    /// device's. Returns the part's token and the bytes sent.
    pub fn send_for_write(
        &self,
        m: MirrorId,
        chunks: &[Range<usize>],
        fresh: Range<usize>,
        token: Option<u64>,
        send: &mut SendChunks<'_>,
    ) -> Result<(u64, u64), HeapError> {
        let _g = self
            .twins
            .gate
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // Registered before anything is checked: from here on, a fetch
        // that merges another device's writes into these chunks (on any
        // thread) first takes this part's twin of the bytes its image
        // was sent — or, for a chunk its device already has current, the
        // bytes it has. Registered after the check, a merge between the
        // two would leave the part writing over an image older than the
        // host's with no twin to merge against, and its fetch would put
        // the old bytes back over the other device's writes.
        let new = token.is_none();
        let token = {
            let mut st = self.twins.lock();
            match token {
                Some(t) => {
                    if let Some(w) = st.writers.iter_mut().find(|w| w.token == t) {
                        w.chunks = chunks.to_vec();
                    }
                    t
                }
                None => {
                    st.next += 1;
                    let t = st.next;
                    st.writers.push(Writer {
                        token: t,
                        mirror: m,
                        chunks: chunks.to_vec(),
                    });
                    t
                }
            }
        };
        // Compiled host code is writing chunks it has not marked yet (raw
        // images): the device's image of any of them may be old, so all of
        // them go, each with what devices wrote merged first. Taken before
        // the stale chunks are: no raw image is handed out while this send
        // holds the gate, but one may drop meanwhile, and its marks landing
        // after `take_stale` read the bits, with the image gone when looked
        // for after, would leave the part writing over an old image of
        // them with no twin — and the host's writes lost when its bytes
        // come back (1 run in 12 of a split launch whose CPU part fetched
        // and marked only its range's chunks).
        let hot: Vec<Range<usize>> = if self.twins.raw.load(Ordering::Acquire) != 0 {
            let st = self.twins.lock();
            let lowered = self.top_lowered();
            chunks
                .iter()
                .flat_map(|r| {
                    st.raws
                        .iter()
                        .flat_map(|raw| {
                            let w = raw.writes.as_deref().filter(|_| raw.lowered == lowered);
                            within(r.clone(), w)
                        })
                        .collect::<Vec<_>>()
                })
                .collect()
        } else {
            Vec::new()
        };
        // The stale chunks, those other devices wrote fetched (merged)
        // first: the host's bytes are then the newest.
        let mut runs = match self.take_stale(m, chunks, fresh.clone()) {
            Ok(r) => r,
            Err(e) => return Err(self.unregister(new, token, e)),
        };
        if !hot.is_empty() {
            for r in &hot {
                if let Err(e) = self.fetch_chunks_of(r.clone()) {
                    return Err(self.unregister(new, token, e));
                }
            }
            let limit = self.committed();
            let old = runs;
            runs = hot
                .iter()
                .flat_map(|r| {
                    [
                        r.start..r.end.min(fresh.start),
                        r.start.max(fresh.end)..r.end,
                    ]
                })
                .map(|r| r.start * CHUNK_BYTES..(r.end * CHUNK_BYTES).min(limit))
                .chain(old)
                .filter(|r| r.start < r.end)
                .collect();
            runs = merged(runs);
        }
        let mut st = self.twins.lock();
        let mut sent = 0u64;
        let mut copies: Vec<(usize, Box<[u8]>)> = Vec::new();
        for r in &runs {
            for c in crate::resident::chunks_of(r.start, r.end) {
                copies.push((c, self.chunk_copy(c)));
            }
        }
        let out: Vec<(usize, &[u8])> = copies
            .iter()
            .map(|(c, b)| (c * CHUNK_BYTES, &b[..]))
            .collect();
        if !out.is_empty() {
            if let Err(e) = send(&out) {
                // Nothing reached the device for sure: the chunks stay stale.
                for (c, _) in &copies {
                    self.mark_stale_for(m, *c);
                }
                drop(st);
                let e = HeapError::Device {
                    bytes: runs.first().map_or(0..0, |r| r.start..r.end),
                    message: e,
                };
                return Err(self.unregister(new, token, e));
            }
            sent = out.iter().map(|(_, b)| b.len() as u64).sum();
        }
        drop(out);
        for (c, b) in copies {
            self.keep_twin(&mut st, m, c, b);
        }
        Ok((token, sent))
    }

    /// A send for a part failed before anything was sent: a part it
    /// registered (`new`) is not registered any more. Returns `e`.
    fn unregister(&self, new: bool, token: u64, e: HeapError) -> HeapError {
        if new {
            self.end_write(token);
        }
        e
    }

    /// The part `token` ended: it writes nothing more, and its device's
    /// twins of chunks it does not own (host-stale by it) go.
    pub fn end_write(&self, token: u64) {
        let mut st = self.twins.lock();
        let Some(i) = st.writers.iter().position(|w| w.token == token) else {
            return;
        };
        let w = st.writers.swap_remove(i);
        let mine: Vec<usize> = st
            .twins
            .keys()
            .filter(|(m, _)| *m == w.mirror)
            .map(|&(_, c)| c)
            .collect();
        for c in mine {
            if !st.writes(w.mirror, c) && !self.owned_by(w.mirror, c) {
                self.drop_twin(&mut st, w.mirror, c);
            }
        }
    }

    /// A collection moved objects: every registered part may now write
    /// any chunk (its next send registers its new arrays), and no twin
    /// is any device's image any more. The collector fetched every chunk
    /// a device wrote first, while the parts were stopped, so no device
    /// has writes a twin must still be merged against; the chunks below
    /// the new top go to every device again, each taking a twin as it
    /// is sent.
    pub(crate) fn twins_widen(&self) {
        let all = 0..self.res_chunks();
        let mut st = self.twins.lock();
        for w in &mut st.writers {
            w.chunks = vec![all.clone()];
        }
        let gone = st.twins.len();
        st.twins.clear();
        self.twins.kept.fetch_sub(gone, Ordering::AcqRel);
    }

    /// Chunks `chunks` lie wholly inside a device eden just carved: every
    /// twin of them goes (module docs of `Heap::zero_device_edges`).
    pub(crate) fn forget_twins(&self, chunks: Range<usize>) {
        if !self.twins.any() {
            return;
        }
        let mut st = self.twins.lock();
        let mine: Vec<(MirrorId, usize)> = st
            .twins
            .keys()
            .filter(|(_, c)| chunks.contains(c))
            .copied()
            .collect();
        for (m, c) in mine {
            self.drop_twin(&mut st, m, c);
        }
    }

    /// Twins kept now (for tests and checks).
    pub fn twins_kept(&self) -> usize {
        self.twins.kept.load(Ordering::Acquire)
    }
}

/// The chunks of `r` among `runs` (`None`: all of `r`).
fn within(r: Range<usize>, runs: Option<&[Range<usize>]>) -> Vec<Range<usize>> {
    match runs {
        None => vec![r],
        Some(runs) => runs
            .iter()
            .map(|w| r.start.max(w.start)..r.end.min(w.end))
            .filter(|x| x.start < x.end)
            .collect(),
    }
}

/// `runs` sorted, with the ones that overlap or touch merged.
fn merged(mut runs: Vec<Range<usize>>) -> Vec<Range<usize>> {
    runs.sort_by_key(|r| r.start);
    let mut out: Vec<Range<usize>> = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}
