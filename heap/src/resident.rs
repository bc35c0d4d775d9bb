//! Residency: the heap's images on devices, kept coherent with the host's
//! chunk by chunk.
//!
//! A runtime with GPUs keeps a copy of the heap on each across launches
//! (each device's [`Mirror`], up to [`MAX_MIRRORS`], named by the
//! [`MirrorId`] [`Heap::attach_mirror`] gives it). The heap is cut into
//! chunks of [`CHUNK_BYTES`], and each chunk has
//!
//! * **host-stale**, with its **owners**: devices wrote it since the host
//!   last had it, and the owners are which; a host access fetches it first
//!   ([`Heap::fetch`], called by every typed load and store;
//!   [`Heap::sync_host`] fetches them all at once);
//! * **device-stale**, per device: the host (or another device) wrote it
//!   since this device last had it; the device's next launch sends it
//!   ([`Heap::take_device_stale`]), fetching it first from the devices that
//!   own it.
//!
//! **Several owners** (two devices wrote one chunk, e.g. different
//! elements of one array in a launch split between them): each owner's
//! image differs from the host's bytes — the version all of them started
//! from, since a device is sent every stale chunk it may write before its
//! kernel runs and the host cannot write a host-stale chunk without
//! fetching it — exactly where that device wrote. A fetch merges: every
//! byte an owner changed takes that owner's value, so writes of different
//! elements all land (as a multiple-writer distributed shared memory
//! merges a page's twins). Two devices writing the same byte differently
//! is a race in the program; the later owner in [`MirrorId`] order wins.
//! A fetch clears its owners' *marks* (a second bit per device, set with
//! the owner bit by every mark) before it reads their images, and an
//! owner that marked the chunk again by the time it is done stays an owner:
//! in a launch split over devices a fetch may run while a kernel writes
//! the chunk, and what that kernel wrote after its image was read is still
//! only on the device.
//!
//! Bytes of a chunk where neither bit is set are equal on both sides
//! below eden's top; above the top, nothing is meaningful on either side
//! (allocation zeroes what it takes, on the side that takes it). The
//! invariant that keeps carving cheap: **no chunk that lies wholly above
//! eden's top is host-stale**. A device marks host-stale only what it wrote
//! below the top it leaves ([`Heap::device_wrote`]), so a carve on the
//! host only ever needs the one chunk that holds the top before it moves.
//!
//! Why 64 KiB chunks: seed 002 measures managed memory migrating in 64 KiB
//! units as the granularity where a transfer's fixed cost (a few µs per
//! copy on PCIe) stops dominating, and a byte per chunk keeps the device's
//! dirty map of a 4 GiB heap at 64 KiB. Runs of adjacent chunks move in
//! one copy, so a large array moves at bus speed however it is chunked.
//!
//! Host writes that race a kernel writing the same chunk are a data race
//! at chunk granularity (the device's copy wins when fetched; with one
//! owner the fetch copies the chunk whole) — except in twin mode, for a
//! launch split over devices, where the chunks its parts write keep
//! twins and every writer's elements land (`twins`). A GPU
//! launch's own host work (replays, a safepoint's operation) writes while
//! its kernel is stopped or waiting; a launch beside it on the same GPU
//! holds chunks disjoint from its own ([`Heap::take_device_stale_in`]
//! sends only those; the CUDA device's `share.rs`). Host code of another
//! thread that writes an array in a chunk a running kernel writes, with
//! no launch ordering the two, is such a race.

use crate::heap::{Heap, HeapError};
use std::ops::Range;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Bytes per coherence chunk.
pub const CHUNK_BYTES: usize = 1 << CHUNK_SHIFT;

/// `log2(CHUNK_BYTES)`: a device marks the chunk of byte offset `b` as
/// `b >> CHUNK_SHIFT`.
pub const CHUNK_SHIFT: u32 = 16;

/// The most devices whose images of one heap are kept coherent (a DGX has
/// eight GPUs; a chunk's owners are a byte of bits).
pub const MAX_MIRRORS: usize = 8;

/// One device's image of the heap: its number among the heap's mirrors,
/// in the order they were attached ([`Heap::attach_mirror`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MirrorId(u8);

impl MirrorId {
    /// The first mirror attached (a runtime with one GPU has only it).
    pub const FIRST: MirrorId = MirrorId(0);

    /// Its number, `0..MAX_MIRRORS`.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    fn bit(self) -> u8 {
        1 << self.0
    }

    /// Mirror number `k` (`k < MAX_MIRRORS`).
    pub(crate) fn from_index(k: usize) -> MirrorId {
        debug_assert!(k < MAX_MIRRORS);
        MirrorId(k as u8)
    }
}

/// A device's copy of the heap, as the host sees it: where host-stale
/// chunks come from.
pub trait Mirror: Send + Sync {
    /// Copy the device's bytes `[at, at + dst.len())` of the heap image into
    /// `dst`. Bytes the device's image does not reach are left alone.
    fn fetch(&self, at: usize, dst: &mut [u8]) -> Result<(), String>;
}

/// The host's heap image for raw access ([`Heap::raw_image`]): current
/// when made, and marked written by the host when dropped.
#[derive(Debug)]
pub struct RawImage<'a> {
    heap: &'a Heap,
    /// Its token with the heap's twins (made in twin mode).
    counted: Option<u64>,
    /// The runs of chunks its code may write ([`Heap::raw_image_touching`]);
    /// `None`: any.
    writes: Option<Vec<Range<usize>>>,
    /// For an image of some chunks ([`Heap::raw_image_touching`],
    /// [`Heap::raw_image_allocating`]): the times eden's top had come down
    /// when it was made ([`Heap::top_lowered`]). If it came down since (a
    /// collection moved objects, the arrays it writes among them), the
    /// whole heap counts as written when it drops.
    lowered: Option<u64>,
}

impl RawImage<'_> {
    /// The address of the heap's first byte: references are word offsets
    /// from here. Code that accesses objects through it must stay inside
    /// committed memory (verified code with its null and bounds checks
    /// does).
    pub fn base_ptr(&self) -> *mut u8 {
        self.heap.base_ptr()
    }
}

impl Drop for RawImage<'_> {
    fn drop(&mut self) {
        let moved = self.lowered.is_some_and(|l| l != self.heap.top_lowered());
        match &self.writes {
            Some(runs) if !moved => {
                // Nothing above the top was written (an allocating image's
                // last run reaches the end of the reservation).
                let used = (self.heap.used() as usize).next_multiple_of(CHUNK_BYTES);
                for r in runs {
                    let (a, b) = (r.start * CHUNK_BYTES, (r.end * CHUNK_BYTES).min(used));
                    if a < b {
                        self.heap.host_wrote(a, b);
                    }
                }
            }
            _ => self.heap.host_wrote(0, self.heap.used() as usize),
        }
        if let Some(token) = self.counted {
            self.heap.raw_dropped(token);
        }
    }
}

/// Chunk bits of one kind.
struct Bits(Box<[AtomicU64]>);

impl Bits {
    fn new(chunks: usize) -> Bits {
        Bits(
            (0..chunks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
        )
    }

    fn get(&self, c: usize) -> bool {
        self.0
            .get(c / 64)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (c % 64)) != 0)
    }

    /// Set bit `c`; whether it was clear.
    fn set(&self, c: usize) -> bool {
        let Some(w) = self.0.get(c / 64) else {
            return false;
        };
        let b = 1 << (c % 64);
        w.load(Ordering::Relaxed) & b == 0 && w.fetch_or(b, Ordering::AcqRel) & b == 0
    }

    /// Clear bit `c`; whether it was set.
    fn clear(&self, c: usize) -> bool {
        let Some(w) = self.0.get(c / 64) else {
            return false;
        };
        let b = 1 << (c % 64);
        w.load(Ordering::Relaxed) & b != 0 && w.fetch_and(!b, Ordering::AcqRel) & b != 0
    }

    /// The set bits in `chunks`, as runs.
    fn runs(&self, chunks: Range<usize>) -> Vec<Range<usize>> {
        let mut out: Vec<Range<usize>> = Vec::new();
        let mut c = chunks.start;
        while c < chunks.end {
            let w = self.0.get(c / 64).map_or(0, |w| w.load(Ordering::Acquire)) >> (c % 64);
            if w == 0 {
                c = (c / 64 + 1) * 64;
                continue;
            }
            c += w.trailing_zeros() as usize;
            if c >= chunks.end {
                break;
            }
            match out.last_mut() {
                Some(r) if r.end == c => r.end = c + 1,
                _ => out.push(c..c + 1),
            }
            c += 1;
        }
        out
    }

    fn count(&self) -> u64 {
        self.0
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum()
    }
}

/// An attached device's image: where its chunks come from, and which of
/// them it lacks.
struct Image {
    mirror: Arc<dyn Mirror>,
    device_stale: Bits,
}

/// Coherence state of a heap with device copies (see the module docs).
pub(crate) struct Residency {
    /// The devices' images, in attach order; `attached` of them are set.
    images: [OnceLock<Image>; MAX_MIRRORS],
    attached: AtomicUsize,
    /// Serializes attaching.
    attach_lock: Mutex<()>,
    chunks: usize,
    host_stale: Bits,
    /// Per chunk, in the low byte the mirrors holding bytes newer than
    /// the host's (a bit per [`MirrorId`]): set before the chunk's
    /// host-stale bit, cleared by the fetch. In the high byte, the mirrors
    /// that marked it since a fetch of it began, set with the owner bit
    /// in one atomic: a fetch clears its owners' high bits before it reads
    /// their images, and those set again by the time it is done stay
    /// owners — their kernels wrote after their images were read. Only a
    /// launch split over devices fetches a chunk while a kernel that
    /// writes it runs (one device's thread fetches what another device's
    /// kernel writes other elements of); one launch's own host work runs
    /// while its kernel is stopped.
    owners: Box<[AtomicU16]>,
    /// Host-stale chunks now: the fast path of every host access is one
    /// load of this.
    stale: AtomicU64,
    /// Serializes fetches (a chunk is fetched once, by whoever gets here
    /// first).
    fetch_lock: Mutex<()>,
    /// Bytes fetched from the device so far.
    fetched: AtomicU64,
}

impl std::fmt::Debug for Residency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Residency")
            .field("mirrors", &self.attached)
            .field("stale", &self.stale)
            .finish_non_exhaustive()
    }
}

impl Residency {
    pub(crate) fn new(max_bytes: usize) -> Residency {
        let chunks = max_bytes.div_ceil(CHUNK_BYTES);
        Residency {
            images: std::array::from_fn(|_| OnceLock::new()),
            attached: AtomicUsize::new(0),
            attach_lock: Mutex::new(()),
            chunks,
            host_stale: Bits::new(chunks),
            owners: (0..chunks).map(|_| AtomicU16::new(0)).collect(),
            stale: AtomicU64::new(0),
            fetch_lock: Mutex::new(()),
            fetched: AtomicU64::new(0),
        }
    }

    /// Chunk `c`'s owners, a bit per [`MirrorId`].
    #[inline]
    fn owners_of(&self, c: usize) -> u8 {
        self.owners[c].load(Ordering::Acquire) as u8
    }

    #[inline]
    pub(crate) fn mirrored(&self) -> bool {
        self.attached.load(Ordering::Acquire) != 0
    }

    /// The mirrors attached, with their device-stale bits.
    fn each(&self) -> impl Iterator<Item = (MirrorId, &Bits)> {
        let n = self.attached.load(Ordering::Acquire);
        self.images[..n]
            .iter()
            .enumerate()
            .filter_map(|(k, i)| Some((MirrorId(k as u8), &i.get()?.device_stale)))
    }

    /// Mirror `m`'s device-stale bits (none before it is attached).
    fn stale_on(&self, m: MirrorId) -> Option<&Bits> {
        Some(&self.images.get(m.index())?.get()?.device_stale)
    }

    /// Mirror number `k`'s image (none before it is attached).
    fn mirror(&self, k: usize) -> Option<&Arc<dyn Mirror>> {
        Some(&self.images.get(k)?.get()?.mirror)
    }

    #[inline]
    fn any_host_stale(&self) -> bool {
        self.stale.load(Ordering::Acquire) != 0
    }
}

/// Chunks that hold any byte of `[start, end)`.
pub fn chunks_of(start: usize, end: usize) -> Range<usize> {
    if start >= end {
        return 0..0;
    }
    start >> CHUNK_SHIFT..(end - 1) / CHUNK_BYTES + 1
}

/// The chunks wholly inside the bytes `[start, end)` (`0..0` when none).
pub fn chunks_within(start: usize, end: usize) -> Range<usize> {
    let (first, past) = (start.div_ceil(CHUNK_BYTES), end / CHUNK_BYTES);
    if first < past { first..past } else { 0..0 }
}

/// The byte range `r` without the chunks in `holes` (sorted), as runs.
fn split_around(r: Range<usize>, holes: &[usize]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = r.start;
    for &c in holes {
        let (hs, he) = (c * CHUNK_BYTES, (c + 1) * CHUNK_BYTES);
        if he <= start || hs >= r.end {
            continue;
        }
        if hs > start {
            out.push(start..hs);
        }
        start = he;
    }
    if start < r.end {
        out.push(start..r.end);
    }
    out
}

/// What residency has done so far: [`Heap::residency`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResidencyStats {
    /// Chunks the device holds newer bytes of.
    pub host_stale_chunks: u64,
    /// Chunks the host holds newer bytes of than a device, summed over the
    /// devices (a chunk two devices lack counts twice).
    pub device_stale_chunks: u64,
    /// Bytes fetched from the device so far (by host reads and writes,
    /// [`Heap::fetch`] and [`Heap::sync_host`]).
    pub fetched_bytes: u64,
}

impl Heap {
    /// Keep a copy of this heap on a device from now on: every chunk below
    /// eden's top is device-stale for it (the device has nothing yet), and
    /// host accesses to chunks the device writes fetch them from `mirror`.
    /// Its name for the calls that concern one device; `None` (and nothing
    /// changes) when [`MAX_MIRRORS`] are attached already.
    pub fn attach_mirror(&self, mirror: Arc<dyn Mirror>) -> Option<MirrorId> {
        let _one = self
            .res
            .attach_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let k = self.res.attached.load(Ordering::Acquire);
        if k == MAX_MIRRORS {
            return None;
        }
        let id = MirrorId(k as u8);
        let bits = Bits::new(self.res.chunks);
        for c in chunks_of(0, self.used() as usize) {
            bits.set(c);
        }
        // Set before `attached` counts it.
        let _ = self.res.images[k].set(Image {
            mirror,
            device_stale: bits,
        });
        self.res.attached.store(k + 1, Ordering::Release);
        Some(id)
    }

    /// Whether a device keeps a copy of this heap.
    #[inline]
    pub fn is_mirrored(&self) -> bool {
        self.res.mirrored()
    }

    /// Chunk counts and bytes fetched.
    pub fn residency(&self) -> ResidencyStats {
        ResidencyStats {
            host_stale_chunks: self.res.stale.load(Ordering::Relaxed),
            device_stale_chunks: self.res.each().map(|(_, b)| b.count()).sum(),
            fetched_bytes: self.res.fetched.load(Ordering::Relaxed),
        }
    }

    /// Make the host's bytes `[at, at + len)` current: fetch the chunks
    /// among them that the device wrote, in one copy per run. Returns the
    /// bytes fetched.
    #[inline]
    pub fn fetch(&self, at: usize, len: usize) -> Result<u64, HeapError> {
        if !self.res.any_host_stale() {
            return Ok(0);
        }
        // Only the chunks in range matter: accesses elsewhere do not wait
        // for fetches (nor take their lock).
        let chunks = chunks_of(at, at.saturating_add(len));
        if chunks.clone().all(|c| !self.res.host_stale.get(c)) {
            return Ok(0);
        }
        self.fetch_chunks(chunks)
    }

    /// Raw access to the host's heap image, for code that reads and writes
    /// it without [`Heap`]'s accessors (compiled CPU kernels): every chunk
    /// a device wrote is fetched first, and when the [`RawImage`] drops,
    /// all of the heap counts as written by the host (a device's copy is
    /// refreshed by its next launch). Outside this crate it is the one way
    /// to the heap's address besides [`Heap::host_bytes`].
    pub fn raw_image(&self) -> Result<RawImage<'_>, HeapError> {
        let counted = self.twin_for_raw(None);
        let image = RawImage {
            heap: self,
            counted,
            writes: None,
            lowered: None,
        };
        self.sync_host()?;
        Ok(image)
    }

    /// [`Heap::raw_image_within`] for code that reads and writes the
    /// chunks of `runs` and allocates: the objects it makes lie above
    /// eden's top as it is now (carves move the top up, and fetch the
    /// chunk that holds it), so the image is `runs` and everything from
    /// the top's chunk up — the objects below it, which the code cannot
    /// reach, are not fetched (a CPU part of a split launch would
    /// otherwise fetch every object the GPUs' parts made before). If the
    /// top comes down before it drops (a collection moved objects), the
    /// whole heap counts as written. `runs` are sorted, disjoint runs of
    /// chunk numbers, as for [`Heap::raw_image_within`].
    pub fn raw_image_allocating(
        &self,
        mut runs: Vec<Range<usize>>,
    ) -> Result<RawImage<'_>, HeapError> {
        let lowered = self.top_lowered();
        let from = self.top_words() as usize * 8 / CHUNK_BYTES;
        runs.retain_mut(|r| {
            r.end = r.end.min(from);
            r.start < r.end
        });
        runs.push(from..self.res.chunks);
        let mut image = self.raw_image_within(runs)?;
        // As the top was before this image's carves looked at it.
        image.lowered = Some(lowered);
        Ok(image)
    }

    /// [`Heap::raw_image`] for code that reads and writes only the chunks
    /// of `runs` (sorted, disjoint runs of chunk numbers: a kernel whose
    /// captures are arrays of numbers and numbers, and which allocates
    /// nothing, stays inside its arrays): [`Heap::raw_image_touching`] with
    /// `runs` read and written.
    pub fn raw_image_within(&self, runs: Vec<Range<usize>>) -> Result<RawImage<'_>, HeapError> {
        self.raw_image_touching(&runs.clone(), runs)
    }

    /// [`Heap::raw_image`] for code that reads only the chunks of `reads`
    /// and writes only those of `writes` (each sorted, disjoint runs of
    /// chunk numbers): only those are fetched (a chunk it writes too: its
    /// other bytes are the host's after), and only `writes` count as
    /// written by the host when it drops — a device's next launch is not
    /// sent the rest of the heap, or what the code only read, again.
    pub fn raw_image_touching(
        &self,
        reads: &[Range<usize>],
        writes: Vec<Range<usize>>,
    ) -> Result<RawImage<'_>, HeapError> {
        let lowered = self.top_lowered();
        let counted = self.twin_for_raw(Some(&writes));
        let image = RawImage {
            heap: self,
            counted,
            writes: Some(writes),
            lowered: Some(lowered),
        };
        for r in reads.iter().chain(image.writes.iter().flatten()) {
            self.fetch_chunks(r.start..r.end.min(self.res.chunks))?;
        }
        Ok(image)
    }

    /// The host's bytes `run` (committed memory), to send to a device:
    /// the runs [`Heap::take_device_stale`] returns, whose chunks the host
    /// wrote and the device has not seen (so the host's bytes are current
    /// without a fetch). `None` when `run` is not committed.
    ///
    /// # Safety
    ///
    /// No host code may write these bytes while the slice lives (keep it
    /// to one copy).
    pub unsafe fn host_bytes(&self, run: Range<usize>) -> Option<&[u8]> {
        if run.start > run.end || run.end > self.committed() {
            return None;
        }
        // SAFETY: the bytes are committed (checked above), and nothing
        // writes them while the slice lives (the caller's promise).
        Some(unsafe { std::slice::from_raw_parts(self.base_ptr().add(run.start), run.len()) })
    }

    /// Make every byte of the host's heap current (before code that reads
    /// it without [`Heap`]'s accessors: the collector, a heap walk; from
    /// outside this crate, [`Heap::raw_image`]). Returns the bytes fetched.
    pub fn sync_host(&self) -> Result<u64, HeapError> {
        if !self.res.any_host_stale() {
            return Ok(0);
        }
        self.fetch_chunks(0..self.res.host_stale.0.len() * 64)
    }

    /// Fetch the host-stale chunks among `chunks` (chunk numbers).
    pub(crate) fn fetch_chunks_of(&self, chunks: Range<usize>) -> Result<u64, HeapError> {
        if !self.res.any_host_stale() {
            return Ok(0);
        }
        self.fetch_chunks(chunks)
    }

    #[cold]
    fn fetch_chunks(&self, chunks: Range<usize>) -> Result<u64, HeapError> {
        if !self.res.mirrored() {
            return Ok(0);
        }
        let _one = self
            .res
            .fetch_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Memory above the high-water mark must stay zero (carves do not
        // zero it), and nothing a device wrote lies there.
        let limit = (self.high_water() as usize * 8).min(self.committed());
        let mut moved = 0u64;
        for run in self.res.host_stale.runs(chunks.clone()) {
            // Runs of chunks with the same owners: one copy each when one
            // device owns them, a merge per chunk otherwise.
            let mut c = run.start;
            while c < run.end {
                let own = self.res.owners_of(c);
                let mut e = c + 1;
                while e < run.end && self.res.owners_of(e) == own {
                    e += 1;
                }
                let (start, end) = (c * CHUNK_BYTES, (e * CHUNK_BYTES).min(limit));
                // Marks from here on are after the images are read.
                for k in c..e {
                    self.res.owners[k].fetch_and(!(u16::from(own) << 8), Ordering::AcqRel);
                }
                if start < end {
                    moved += self.fetch_owned(own, start..end)?;
                }
                for k in c..e {
                    self.fetched_chunk(k, own);
                }
                c = e;
            }
        }
        self.res.fetched.fetch_add(moved, Ordering::Relaxed);
        Ok(moved)
    }

    /// Bring bytes `run` (committed, host-stale chunks whose owners are
    /// `own`) from their owners: a copy from the one owner, or each
    /// owner's bytes merged over the host's (module docs). Returns the
    /// bytes moved.
    fn fetch_owned(&self, own: u8, run: Range<usize>) -> Result<u64, HeapError> {
        let owners: Vec<(MirrorId, &Arc<dyn Mirror>)> = (0..MAX_MIRRORS)
            .filter(|k| own & (1 << k) != 0)
            .filter_map(|k| Some((MirrorId(k as u8), self.res.mirror(k)?)))
            .collect();
        let failed = |e: String| HeapError::Device {
            bytes: run.clone(),
            message: e,
        };
        if self.twins.on() {
            // Parts registered for these chunks keep what they started from.
            self.twin_before_change(chunks_of(run.start, run.end));
        }
        if self.twins.on() || self.twins_kept() != 0 {
            return self.fetch_twinned(&owners, run);
        }
        // SAFETY: `run` is committed (below the high-water mark). Its
        // chunks are host-stale, so no host code reads or writes them until
        // their bits clear: every accessor fetches first, and fetches are
        // serialized by `fetch_lock`.
        let dst = unsafe { self.region.bytes_mut(run.start, run.len()) };
        match owners.as_slice() {
            [] => Ok(0),
            [(_, m)] => {
                m.fetch(run.start, dst).map_err(failed)?;
                Ok(run.len() as u64)
            }
            several => {
                let base = dst.to_vec();
                let mut theirs = vec![0u8; run.len()];
                for (_, m) in several {
                    // Bytes the owner's image does not reach are the base.
                    theirs.copy_from_slice(&base);
                    m.fetch(run.start, &mut theirs).map_err(failed)?;
                    for ((d, &t), &b) in dst.iter_mut().zip(&theirs).zip(&base) {
                        if t != b {
                            *d = t;
                        }
                    }
                }
                Ok((run.len() * several.len()) as u64)
            }
        }
    }

    /// [`Heap::fetch_owned`] where twins may be kept or host code may write
    /// other elements of the chunks meanwhile (twin mode): chunk by chunk,
    /// each owner's bytes merged over the host's against its twin, or
    /// against the host's bytes before the merge where it has none.
    fn fetch_twinned(
        &self,
        owners: &[(MirrorId, &Arc<dyn Mirror>)],
        run: Range<usize>,
    ) -> Result<u64, HeapError> {
        let mut moved = 0u64;
        let mut at = run.start;
        // A chunk's bytes at a time, in buffers kept from chunk to chunk.
        let (mut base, mut theirs, mut against) = (Vec::new(), Vec::new(), Vec::new());
        while at < run.end {
            let c = at / CHUNK_BYTES;
            let end = ((c + 1) * CHUNK_BYTES).min(run.end);
            base.clear();
            // SAFETY: `[at, end)` is committed (inside `run`), read once.
            base.extend_from_slice(unsafe {
                std::slice::from_raw_parts(self.base_ptr().add(at), end - at)
            });
            for &(m, mirror) in owners {
                theirs.clear();
                theirs.extend_from_slice(&base);
                mirror
                    .fetch(at, &mut theirs)
                    .map_err(|e| HeapError::Device {
                        bytes: at..end,
                        message: e,
                    })?;
                // Against the owner's twin where it has one (a twin taken
                // when less of the heap was committed covers less of the
                // chunk: the host's bytes beyond it were the version sent).
                let from = at - c * CHUNK_BYTES;
                against.clear();
                against.extend_from_slice(&base);
                self.twin_over(m, c, from, &mut against);
                // SAFETY: `[at, end)` is committed heap memory.
                unsafe { crate::twins::merge_into(self.base_ptr().add(at), &theirs, &against) };
                // The host has these bytes of the owner's now: its writes
                // from here on are the bytes that differ from them.
                self.twin_advance(m, c, from, &theirs);
                moved += theirs.len() as u64;
            }
            at = end;
        }
        Ok(moved)
    }

    /// Whether chunk `c` is host-stale with `m` among its owners.
    pub(crate) fn owned_by(&self, m: MirrorId, c: usize) -> bool {
        self.res.host_stale.get(c)
            && self
                .res
                .owners
                .get(c)
                .is_some_and(|o| o.load(Ordering::Acquire) & u16::from(m.bit()) != 0)
    }

    /// Mark chunk `c` device-stale for `m` again (a send that failed).
    pub(crate) fn mark_stale_for(&self, m: MirrorId, c: usize) {
        if let Some(b) = self.res.stale_on(m) {
            b.set(c);
        }
    }

    /// The chunks the heap may have.
    pub(crate) fn res_chunks(&self) -> usize {
        self.res.chunks
    }

    /// Chunk `c`'s bytes from owners `own` are on the host now: those
    /// owners are no longer ahead of it, and it is current on the host
    /// unless another device wrote it meanwhile.
    fn fetched_chunk(&self, c: usize, own: u8) {
        // Owners whose kernels marked it again while it was fetched keep
        // their bits (and twins): what they wrote after the fetch read
        // their images is still only on the device.
        let mut w = self.res.owners[c].load(Ordering::Acquire);
        let (own, left) = loop {
            let done = own & !((w >> 8) as u8);
            let new = w & !u16::from(done);
            match self.res.owners[c].compare_exchange_weak(
                w,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break (done, new as u8),
                Err(now) => w = now,
            }
        };
        self.twins_fetched(c, own);
        if left == 0 && self.res.host_stale.clear(c) {
            self.res.stale.fetch_sub(1, Ordering::AcqRel);
            // A device that marked it between the two steps set its owner
            // bit first: the chunk stays host-stale for it.
            if self.res.owners_of(c) != 0 && self.res.host_stale.set(c) {
                self.res.stale.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// The 8 bytes at `at` (8-aligned) as the devices hold them, when its
    /// chunk is host-stale; `None` when the host's bytes are current
    /// (after a fetch of the chunk, when several devices wrote it).
    pub(crate) fn peek_device(&self, at: usize) -> Result<Option<u64>, HeapError> {
        let c = at / CHUNK_BYTES;
        if !self.res.mirrored() || !self.res.host_stale.get(c) {
            return Ok(None);
        }
        let own = self.res.owners_of(c);
        let m = match own.count_ones() {
            1 => self.res.mirror(own.trailing_zeros() as usize),
            _ => None,
        };
        let Some(m) = m else {
            self.fetch_chunks(c..c + 1)?;
            return Ok(None);
        };
        let mut b = [0u8; 8];
        m.fetch(at, &mut b).map_err(|e| HeapError::Device {
            bytes: at..at + 8,
            message: e,
        })?;
        Ok(Some(u64::from_le_bytes(b)))
    }

    /// Before the host writes `[at, at + len)`: fetch what the devices
    /// wrote there, and mark it for them. In twin mode, what it returns
    /// keeps a part's send out until the caller's store is done (hold it
    /// across the store: `twins`).
    #[inline]
    pub(crate) fn writable(
        &self,
        at: usize,
        len: usize,
    ) -> Result<crate::twins::StoreGate<'_>, HeapError> {
        if !self.res.mirrored() {
            return Ok(None);
        }
        let gate = self.store_gate(at, len);
        self.fetch(at, len)?;
        self.host_wrote(at, at + len);
        Ok(gate)
    }

    /// The host wrote bytes `[start, end)` (their chunks must not be
    /// host-stale): each device's next launch sends them. Code that writes
    /// the heap without [`Heap`]'s accessors (a compiled CPU kernel) calls
    /// this after, over what it may have written.
    pub fn host_wrote(&self, start: usize, end: usize) {
        if !self.res.mirrored() {
            return;
        }
        for (_, bits) in self.res.each() {
            for c in chunks_of(start, end) {
                bits.set(c);
            }
        }
    }

    /// Device `m` wrote bytes `[start, end)` (below the top it leaves):
    /// host accesses fetch them first.
    pub fn device_wrote(&self, m: MirrorId, start: usize, end: usize) {
        for c in chunks_of(start, end) {
            self.device_wrote_chunk(m, c);
        }
    }

    /// Device `m` wrote chunk `c` (its dirty map, byte `c`): the host
    /// fetches it before touching it, and every other device's copy of it
    /// is old.
    pub fn device_wrote_chunk(&self, m: MirrorId, c: usize) {
        if !self.res.mirrored() || c >= self.res.chunks {
            return;
        }
        // The owner bit and the mark a fetch running now looks for
        // (`fetched_chunk`), in one atomic.
        self.res.owners[c].fetch_or(u16::from(m.bit()) * 0x101, Ordering::AcqRel);
        if self.res.host_stale.set(c) {
            self.res.stale.fetch_add(1, Ordering::AcqRel);
        }
        for (k, bits) in self.res.each() {
            if k != m {
                bits.set(c);
            }
        }
    }

    /// The runs of chunks (as byte ranges, clamped to committed memory)
    /// that device `m` has not seen the latest bytes of: its launch sends
    /// exactly these (the chunks other devices wrote are fetched from them
    /// first). Their bits clear, and so do those of the chunks wholly
    /// inside `skip` without being sent (the launch's device eden, which
    /// it zeroes on the device).
    pub fn take_device_stale(
        &self,
        m: MirrorId,
        skip: Range<usize>,
    ) -> Result<Vec<Range<usize>>, HeapError> {
        let total = self.res.chunks;
        let inside = chunks_within(skip.start, skip.end);
        self.take_stale(m, std::slice::from_ref(&(0..total)), inside)
    }

    /// [`Heap::take_device_stale`] for the chunks `chunks` only (sorted,
    /// disjoint runs of chunk numbers): a launch that shares the device
    /// with others sends the stale chunks of its own arrays, and leaves
    /// the rest stale for the launches that touch them.
    pub fn take_device_stale_in(
        &self,
        m: MirrorId,
        chunks: &[Range<usize>],
    ) -> Result<Vec<Range<usize>>, HeapError> {
        self.take_stale(m, chunks, 0..0)
    }

    /// Clear device `m`'s stale bits in `chunks` and return the byte runs
    /// to send: those chunks less the ones in `inside` (cleared, not sent)
    /// and less any chunk only `m` itself wrote since the host wrote it
    /// (host code wrote it while `m`'s kernel did: a race at chunk
    /// granularity), which keeps `m`'s bytes. A chunk another device wrote
    /// is fetched first (the host's bytes are then the newest: a merge
    /// with `m`'s own writes where `m` wrote it too).
    pub(crate) fn take_stale(
        &self,
        m: MirrorId,
        chunks: &[Range<usize>],
        inside: Range<usize>,
    ) -> Result<Vec<Range<usize>>, HeapError> {
        let Some(bits) = self.res.stale_on(m) else {
            return Ok(Vec::new());
        };
        let limit = self.committed();
        let mut send = Vec::new();
        let mut both = Vec::new();
        let mut fetch: Vec<Range<usize>> = Vec::new();
        for want in chunks {
            for run in bits.runs(want.clone()) {
                for c in run.clone() {
                    bits.clear(c);
                    if self.res.host_stale.get(c) {
                        // `m` alone wrote it since the host had it: the
                        // host's write raced `m`'s kernel, and `m`'s bytes
                        // stay. Others wrote it too: `m` gets the merge,
                        // its own writes in it.
                        // With a twin of it, `m`'s writes merge with the
                        // host's (twin mode): fetch, then send.
                        if self.res.owners_of(c) == m.bit() && !self.has_twin(m, c) {
                            both.push(c);
                        } else {
                            match fetch.last_mut() {
                                Some(r) if r.end == c => r.end = c + 1,
                                _ => fetch.push(c..c + 1),
                            }
                        }
                    }
                }
                let (a, b) = (run.start, run.end);
                // The part of the run outside `inside`, as up to two runs.
                for part in [a..b.min(inside.start), a.max(inside.end)..b] {
                    let bytes = part.start * CHUNK_BYTES..(part.end * CHUNK_BYTES).min(limit);
                    if part.start < part.end && bytes.start < bytes.end {
                        send.push(bytes);
                    }
                }
            }
        }
        for run in fetch {
            if let Err(e) = self.fetch_chunks(run) {
                // Nothing is sent: the chunks stay stale for `m`.
                for r in &send {
                    for c in chunks_of(r.start, r.end) {
                        bits.set(c);
                    }
                }
                return Err(e);
            }
        }
        if self.twins_kept() != 0 {
            for r in &send {
                for c in chunks_of(r.start, r.end) {
                    self.twin_sent(m, c);
                }
            }
        }
        if both.is_empty() {
            return Ok(send);
        }
        Ok(send
            .into_iter()
            .flat_map(|r| split_around(r, &both))
            .collect())
    }

    /// Before a carve moves eden's top from `top` words: the chunk that
    /// holds it must be current on the host (its bytes below the top are
    /// meaningful, and the carve's owner writes the rest).
    #[inline]
    pub(crate) fn before_carve(&self, top: u64) -> Result<(), HeapError> {
        self.fetch(top as usize * 8, 1).map(|_| ())
    }

    /// Whether chunk `c` is host-stale (for tests and checks).
    pub fn is_host_stale(&self, c: usize) -> bool {
        self.res.host_stale.get(c)
    }

    /// Whether chunk `c` is device-stale for device `m` (for tests and
    /// checks).
    pub fn is_device_stale(&self, m: MirrorId, c: usize) -> bool {
        self.res.stale_on(m).is_some_and(|b| b.get(c))
    }
}
