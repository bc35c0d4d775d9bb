//! The heap's image on the GPU, kept across launches (docs/DESIGN.md,
//! "The heap on the GPU"): the [`Mirror`] the host heap fetches the
//! chunks a kernel wrote from, and the scatter kernel that writes fillers
//! into the image. The dirty map kernels mark is a launch's
//! (`block.rs`), a byte per chunk of the image.
//!
//! The host heap decides what moves (`offload_heap::resident`: chunk
//! bits); this module only holds the device memory and moves bytes. The
//! image grows with the heap (a new buffer, the old one copied over on the
//! device) and is replaced only under a hold of the GPU alone (`share.rs`), so the
//! addresses a running kernel holds stay valid.

use super::{cuda_err, driver_error};
use crate::error::OffloadError;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, DevicePtr};
use offload_heap::resident::CHUNK_BYTES;
use offload_heap::{Heap, Mirror, MirrorId};
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// What [`DeviceHeap::forget_pages`] notes the device holds for a page it
/// may have tagged: no page has this tag (its top bit says "no class" and
/// it is neither `ARRAYS` nor `MIXED`), so the page is sent again.
const UNKNOWN_TAG: u32 = offload_abi::pages::MIXED - 1;

/// The image, with its device address (taken once, so that copies need
/// no stream ordering of cudarc's). The image starts `pad` bytes into its
/// buffer, at a multiple of [`CHUNK_BYTES`]: kernels find a store's chunk
/// from its address alone (`offload_jit::ptx`, `mark_dirty`).
#[derive(Default)]
struct Image {
    heap: Option<CudaSlice<u8>>,
    /// Bytes of image (the buffer holds `pad` more).
    cap: usize,
    pad: usize,
    heap_at: u64,
}

/// The heap's image on one GPU.
pub(crate) struct DeviceHeap {
    /// Lane 0's stream (`lane.rs`): allocation, zeroing, the page table,
    /// the scatter kernel.
    stream: Arc<CudaStream>,
    /// The stream of every copy between the image and the host, with raw
    /// addresses (cudarc's per-buffer event tracking would order them
    /// after the running kernel): host code fetches and sends chunks while
    /// a kernel waits in place at a safepoint. Each copy is synchronized
    /// before the call returns, so every lane's stream sees it done.
    copy: Arc<CudaStream>,
    image: Mutex<Image>,
    /// The heap's page table (`offload_heap::pages`) as kernels read it.
    pages: Mutex<PageImage>,
    scatter: CudaFunction,
    /// The heap's name for this image, once attached.
    id: std::sync::OnceLock<MirrorId>,
    /// Whether the runtime has other GPUs besides this one.
    several: std::sync::atomic::AtomicBool,
}

/// The page table on the device: a `u32` tag per page of the heap's
/// maximum, and what it holds (`held`, the host's copy of it); its first
/// `len` tags were the host's at table version `version`.
#[derive(Default)]
struct PageImage {
    buf: Option<CudaSlice<u32>>,
    at: u64,
    held: Vec<u32>,
    len: usize,
    version: Option<u64>,
}

impl DeviceHeap {
    /// An empty image on `stream`'s GPU (its memory comes with the first
    /// launch), with the scatter kernel loaded.
    pub(crate) fn new(stream: Arc<CudaStream>) -> Result<DeviceHeap, String> {
        let module = stream
            .context()
            .load_module(cudarc::nvrtc::Ptx::from_src(
                offload_jit::ptx::scatter_kernel(),
            ))
            .map_err(|e| format!("CUDA: the heap's scatter kernel: {}", driver_error(&e)))?;
        let scatter = module
            .load_function(offload_jit::ptx::SCATTER_ENTRY)
            .map_err(|e| format!("CUDA: the heap's scatter kernel: {}", driver_error(&e)))?;
        let copy = stream
            .context()
            .new_stream()
            .map_err(|e| format!("CUDA: the heap's copy stream: {}", driver_error(&e)))?;
        Ok(DeviceHeap {
            stream,
            copy,
            image: Mutex::new(Image::default()),
            pages: Mutex::new(PageImage::default()),
            scatter,
            id: std::sync::OnceLock::new(),
            several: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// This image is the heap's mirror `id` ([`Heap::attach_mirror`]);
    /// `several`: other GPUs' images are besides it.
    pub(crate) fn attached(&self, id: MirrorId, several: bool) {
        let _ = self.id.set(id);
        self.several
            .store(several, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether other GPUs' images are besides this one.
    pub(crate) fn several(&self) -> bool {
        self.several.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The heap's name for this image (the first mirror until attached).
    pub(crate) fn id(&self) -> MirrorId {
        self.id.get().copied().unwrap_or(MirrorId::FIRST)
    }

    fn image(&self) -> std::sync::MutexGuard<'_, Image> {
        self.image
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Make the image hold at least `bytes` (whole chunks; at least double
    /// the old size when it grows, so growth is rare), keeping what it
    /// holds (copied on the device, not over the bus). Call only under the
    /// hold of the GPU alone (`share.rs`).
    pub(crate) fn ensure(&self, bytes: usize) -> Result<(), OffloadError> {
        let s = &self.stream;
        let mut img = self.image();
        let old = img.cap;
        if old >= bytes {
            return Ok(());
        }
        let cap = bytes.max(2 * old).next_multiple_of(CHUNK_BYTES);
        // SAFETY: the new image's bytes are either copied from the old one
        // right below or lie above eden's top, where no one reads before a
        // push or a device eden's zeroing writes them.
        let mut heap: CudaSlice<u8> =
            unsafe { s.alloc(cap + CHUNK_BYTES) }.map_err(cuda_err("heap image"))?;
        let raw = heap.device_ptr(s).0;
        let pad = (raw.next_multiple_of(CHUNK_BYTES as u64) - raw) as usize;
        if let Some(prev) = &img.heap {
            s.memcpy_dtod(
                &prev.slice(img.pad..img.pad + old),
                &mut heap.slice_mut(pad..pad + old),
            )
            .map_err(cuda_err("heap image"))?;
        }
        img.heap_at = raw + pad as u64;
        img.heap = Some(heap);
        img.cap = cap;
        img.pad = pad;
        Ok(())
    }

    /// Bring the device's page table up to date with the host's for the
    /// pages below eden's top. The device's table covers the heap's
    /// maximum, set to [`MIXED`](offload_abi::pages::MIXED) at the first
    /// launch (one allocation and one memset); after that only tags that
    /// differ from what the device holds are sent (one copy on the
    /// image's stream, ordered before the next kernel), and nothing while
    /// the host's table is unchanged and covers the pages. Call only under
    /// a hold of the GPU alone. Returns the bytes sent.
    pub(crate) fn send_pages(&self, heap: &Heap) -> Result<u64, OffloadError> {
        let table = heap.pages();
        let need = (offload_abi::pages::page_of(heap.top_words() as u32) + 1).min(table.len());
        let version = table.version();
        let s = &self.stream;
        let mut img = self
            .pages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if img.version == Some(version) && need <= img.len {
            return Ok(0);
        }
        if img.buf.is_none() {
            // SAFETY: every byte is set by the memset right below, before
            // any kernel reads the table.
            let buf: CudaSlice<u32> =
                unsafe { s.alloc(table.len()) }.map_err(cuda_err("page table"))?;
            let at = buf.device_ptr(s).0;
            // SAFETY: `at` is the start of `buf`, `4 * len` bytes, which
            // only this stream uses.
            unsafe { super::raw::memset(at, 0xFF, 4 * table.len(), s.cu_stream()) }
                .map_err(cuda_err("page table"))?;
            img.at = at;
            img.buf = Some(buf);
            img.held = vec![offload_abi::pages::MIXED; table.len()];
        }
        let now = table.snapshot(need);
        let first = now.iter().zip(&img.held).position(|(a, b)| a != b);
        let mut sent = 0;
        if let Some(first) = first {
            let last = now
                .iter()
                .zip(&img.held)
                .rposition(|(a, b)| a != b)
                .expect("a first difference has a last");
            let buf = img.buf.as_mut().expect("allocated above");
            s.memcpy_htod(&now[first..=last], &mut buf.slice_mut(first..=last))
                .map_err(cuda_err("page table"))?;
            img.held[first..=last].copy_from_slice(&now[first..=last]);
            sent = 4 * (last + 1 - first) as u64;
        }
        img.len = need;
        img.version = Some(version);
        Ok(sent)
    }

    /// Forget what the device's table holds for `pages`, which a kernel
    /// may tag (a device eden of several kinds): the next
    /// [`DeviceHeap::send_pages`] sends them unless
    /// [`DeviceHeap::fetch_pages`] took them back first (a launch that
    /// failed before it could leaves no tag the host does not know).
    pub(crate) fn forget_pages(&self, pages: Range<usize>) {
        let mut img = self
            .pages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let len = img.held.len();
        let pages = pages.start.min(len)..pages.end.min(len);
        // No tag is this: every page differs from it.
        img.held[pages].fill(UNKNOWN_TAG);
        img.version = None;
    }

    /// After a kernel that may tag the pages `forgotten`
    /// ([`DeviceHeap::forget_pages`]): take the device's tags of `pages`
    /// (the part of them it carved, where it tagged those it carved for a
    /// class kind, `offload_jit::ptx` alloc) back into the host's table;
    /// the rest of `forgotten` holds what the host sent. The device then
    /// holds what the host does there. Call only under a hold alone,
    /// after the kernel. Returns the bytes fetched.
    pub(crate) fn fetch_pages(
        &self,
        heap: &Heap,
        forgotten: Range<usize>,
        pages: Range<usize>,
    ) -> Result<u64, OffloadError> {
        let mut img = self
            .pages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let len = img.held.len();
        let table = heap.pages();
        for p in forgotten.start.min(len)..forgotten.end.min(len) {
            if !pages.contains(&p) {
                img.held[p] = table.tag(p);
            }
        }
        let pages = pages.start.min(len)..pages.end.min(len);
        if img.buf.is_none() || pages.is_empty() {
            return Ok(0);
        }
        let mut tags = vec![0u32; pages.len()];
        // SAFETY: the range lies inside the table (clamped to its length
        // above), which no kernel writes now; `tags` is as long.
        unsafe {
            super::raw::fetch(
                &mut tags,
                img.at + 4 * pages.start as u64,
                self.stream.cu_stream(),
            )
        }
        .map_err(cuda_err("page table"))?;
        heap.pages().set_pages(pages.start, &tags);
        img.held[pages.clone()].copy_from_slice(&tags);
        Ok(4 * tags.len() as u64)
    }

    /// The page table's device address (0 before the first
    /// [`DeviceHeap::send_pages`]).
    pub(crate) fn pages_at(&self) -> u64 {
        self.pages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .at
    }

    /// Bytes of heap the image holds now (it grows only under a hold of
    /// the GPU alone, `share.rs`).
    pub(crate) fn cap(&self) -> usize {
        self.image().cap
    }

    /// Wait for what is queued on the image's stream (lane 0's: growth,
    /// the page table, a device eden's zeroing), for a launch whose
    /// kernel runs on another stream.
    pub(crate) fn settle(&self) -> Result<(), OffloadError> {
        self.stream.synchronize().map_err(cuda_err("heap image"))
    }

    /// The image's device address (valid until the next
    /// [`DeviceHeap::ensure`]).
    pub(crate) fn heap_at(&self) -> u64 {
        self.image().heap_at
    }

    /// Send the host's bytes of `runs` (what the host wrote since the
    /// device last had it). Returns the bytes sent.
    pub(crate) fn push(&self, heap: &Heap, runs: &[Range<usize>]) -> Result<u64, OffloadError> {
        self.bind().map_err(cuda_err("heap image"))?;
        let img = self.image();
        if img.heap.is_none() {
            return Ok(0);
        }
        let base = img.heap_at;
        let mut sent = 0;
        for r in runs {
            let r = r.start..r.end.min(img.cap);
            if r.is_empty() {
                continue;
            }
            // SAFETY: no host code writes the heap during a launch's
            // copies (the launch is a running worker, or parked for its
            // waiting slots after the operation that wrote).
            let Some(src) = (unsafe { heap.host_bytes(r.clone()) }) else {
                return Err(OffloadError::Setup(format!(
                    "heap bytes {r:?} to send are not committed"
                )));
            };
            // SAFETY: `src` lies inside the image (the run is clamped to
            // its capacity above), and lives until the copy is done
            // (`sync_copies` below).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    base + r.start as u64,
                    src,
                    self.copy.cu_stream(),
                )
            }
            .map_err(cuda_err("heap image"))?;
            sent += r.len() as u64;
        }
        if sent > 0 {
            self.sync_copies()?;
        }
        Ok(sent)
    }

    /// Copy `chunks` (each a byte offset of the heap and its bytes) into
    /// the image, returning once they are there: a part of a split launch
    /// is sent its chunks from twins (`part.rs`). Bytes past the image's
    /// capacity are not sent.
    pub(crate) fn push_chunks(&self, chunks: &[(usize, &[u8])]) -> Result<(), OffloadError> {
        self.bind().map_err(cuda_err("heap image"))?;
        let img = self.image();
        if img.heap.is_none() {
            return Ok(());
        }
        let base = img.heap_at;
        let mut any = false;
        for &(at, bytes) in chunks {
            let n = bytes.len().min(img.cap.saturating_sub(at));
            if n == 0 {
                continue;
            }
            // SAFETY: `[at, at + n)` lies inside the image (clamped to its
            // capacity), and `bytes` lives until the copy is done
            // (`sync_copies` below).
            unsafe {
                cudarc::driver::result::memcpy_htod_async(
                    base + at as u64,
                    &bytes[..n],
                    self.copy.cu_stream(),
                )
            }
            .map_err(cuda_err("heap image"))?;
            any = true;
        }
        if any {
            self.sync_copies()?;
        }
        Ok(())
    }

    /// Make the GPU's context current on this thread: the raw copies below
    /// run on whatever thread touches the heap (a replay's worker, the
    /// REPL's), and the driver needs a current context for them.
    fn bind(&self) -> Result<(), cudarc::driver::DriverError> {
        self.copy.context().bind_to_thread()
    }

    fn sync_copies(&self) -> Result<(), OffloadError> {
        // SAFETY: the copy stream is alive (owned by `self`).
        unsafe { cudarc::driver::result::stream::synchronize(self.copy.cu_stream()) }
            .map_err(cuda_err("heap image"))
    }

    /// `dst.len()` elements at device address `at`, on the copy stream:
    /// readable while a kernel runs (a waiting one's counters and map).
    pub(crate) fn read_raw<T: cudarc::driver::DeviceRepr>(
        &self,
        at: u64,
        dst: &mut [T],
    ) -> Result<(), OffloadError> {
        self.bind().map_err(cuda_err("device state"))?;
        // SAFETY: `at` is the start of a live device buffer of at least
        // `dst.len()` elements (the caller's), and `dst` outlives the copy,
        // which is synchronized before this returns.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(dst, at, self.copy.cu_stream()) }
            .map_err(cuda_err("device state"))?;
        self.sync_copies()
    }

    /// `src` to device address `at`, on the copy stream: the control word
    /// a running kernel polls.
    pub(crate) fn write_raw<T: cudarc::driver::DeviceRepr>(
        &self,
        at: u64,
        src: &[T],
    ) -> Result<(), OffloadError> {
        self.bind().map_err(cuda_err("device state"))?;
        // SAFETY: `at` is the start of a live device buffer of at least
        // `src.len()` elements (the caller's), and `src` outlives the copy,
        // which is synchronized before this returns.
        unsafe { cudarc::driver::result::memcpy_htod_async(at, src, self.copy.cu_stream()) }
            .map_err(cuda_err("device state"))?;
        self.sync_copies()
    }

    /// Zero the image's bytes `range` (a device eden), on the device.
    pub(crate) fn zero_eden(&self, range: Range<usize>) -> Result<(), OffloadError> {
        let s = &self.stream;
        let mut img = self.image();
        let (cap, pad) = (img.cap, img.pad);
        if let Some(buf) = img.heap.as_mut() {
            let r = range.start..range.end.min(cap);
            if !r.is_empty() {
                s.memset_zeros(&mut buf.slice_mut(pad + r.start..pad + r.end))
                    .map_err(cuda_err("device eden"))?;
            }
        }
        Ok(())
    }

    /// Store each `(byte offset, word)` into the image: the list sent to
    /// `list_at` (device memory of `room` bytes, the launch block's), one
    /// launch of the scatter kernel, and a wait for it (host code may fetch
    /// the chunks it writes next). Returns the bytes sent.
    pub(crate) fn scatter(
        &self,
        words: &[(u64, u64)],
        list_at: u64,
        room: usize,
    ) -> Result<u64, OffloadError> {
        let img = self.image();
        if words.is_empty() || img.heap.is_none() {
            return Ok(0);
        }
        let list: Vec<u64> = words.iter().flat_map(|&(a, w)| [a, w]).collect();
        if 8 * list.len() > room {
            return Err(OffloadError::Setup(format!(
                "{} fillers do not fit the launch block's {room} bytes for them",
                words.len()
            )));
        }
        let s = self.stream.cu_stream();
        let n = words.len() as u32;
        let (mut hp, mut lp, mut nn) = (img.heap_at, list_at, n);
        let mut params = [
            (&raw mut hp).cast::<std::ffi::c_void>(),
            (&raw mut lp).cast(),
            (&raw mut nn).cast(),
        ];
        // SAFETY: the list fits its room (checked), which lies in the live
        // launch block; the kernel takes (u64 image, u64 list, u32 n),
        // reads `2n` words of the list and writes 8 bytes at each offset,
        // all inside the image (fillers lie below the device eden's end);
        // the stream is synchronized before the list or the image can go.
        unsafe {
            super::raw::send(list_at, &list, s).map_err(cuda_err("fillers"))?;
            super::raw::launch(
                self.scatter.cu_function(),
                n.div_ceil(256),
                256,
                s,
                &mut params,
            )
            .map_err(cuda_err("fillers"))?;
            cudarc::driver::result::stream::synchronize(s).map_err(cuda_err("fillers"))?;
        }
        Ok(8 * list.len() as u64)
    }
}

/// Mark what a kernel wrote for host reads: the chunks its dirty map
/// `map` names below byte `top` (the device eden's top), and the eden it
/// allocated in, `[start, top)`.
pub(crate) fn mark_kernel_writes(
    heap: &Heap,
    dh: &DeviceHeap,
    map: &[u8],
    start: usize,
    top: usize,
) {
    let (m, below) = (dh.id(), top.div_ceil(CHUNK_BYTES).min(map.len()));
    for (c, _) in map[..below].iter().enumerate().filter(|(_, d)| **d != 0) {
        heap.device_wrote_chunk(m, c);
    }
    heap.device_wrote(m, start, top);
}

impl Mirror for DeviceHeap {
    fn fetch(&self, at: usize, dst: &mut [u8]) -> Result<(), String> {
        // Any thread fetches, in the middle of work on another GPU (a
        // launch's replay reading what a kernel on this one wrote): with
        // several GPUs it gets its context back after the copy (two more
        // driver calls; with one GPU, every context is this one).
        let before = if self.several() {
            cudarc::driver::result::ctx::get_current().map_err(|e| driver_error(&e))?
        } else {
            None
        };
        self.bind().map_err(|e| driver_error(&e))?;
        let r = self.fetch_bound(at, dst);
        if let Some(ctx) = before {
            // SAFETY: `ctx` was current on this thread just above: a live
            // context (every context offload makes lives as long as its
            // runtime, which this fetch is part of).
            unsafe { cudarc::driver::result::ctx::set_current(ctx) }
                .map_err(|e| driver_error(&e))?;
        }
        r
    }
}

impl DeviceHeap {
    /// [`Mirror::fetch`] with this GPU's context current.
    fn fetch_bound(&self, at: usize, dst: &mut [u8]) -> Result<(), String> {
        let img = self.image();
        if img.heap.is_none() {
            return Ok(());
        }
        let end = (at + dst.len()).min(img.cap);
        if at >= end {
            return Ok(());
        }
        let n = end - at;
        let src = img.heap_at + at as u64;
        // SAFETY: `[at, end)` lies inside the image and `dst[..n]` outlives
        // the copy, synchronized right below.
        unsafe {
            cudarc::driver::result::memcpy_dtoh_async(&mut dst[..n], src, self.copy.cu_stream())
                .and_then(|()| cudarc::driver::result::stream::synchronize(self.copy.cu_stream()))
        }
        .map_err(|e| driver_error(&e))
    }
}
