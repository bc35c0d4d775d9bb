//! Residency (`offload_heap::resident`): a heap with a device copy stays
//! coherent under any mix of host writes, host allocations and "launches"
//! that write and allocate on the device, with a byte-array device standing
//! in for a GPU (the CUDA device runs the same protocol; `tests/gpu.rs`
//! checks it on the virtual GPU).

use offload_heap::resident::{CHUNK_BYTES, CHUNK_SHIFT};
use offload_heap::{Heap, HeapConfig, Mirror, MirrorId, layout::Header};
use offload_ir::Elem;
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A device's heap image in host memory.
#[derive(Default)]
struct FakeDevice {
    bytes: Mutex<Vec<u8>>,
    fetched: AtomicU64,
    sent: AtomicU64,
    /// The heap's name for it, once attached.
    id: OnceLock<MirrorId>,
}

impl Mirror for FakeDevice {
    fn fetch(&self, at: usize, dst: &mut [u8]) -> Result<(), String> {
        let b = self.bytes.lock().unwrap();
        let n = dst.len().min(b.len().saturating_sub(at));
        dst[..n].copy_from_slice(&b[at..at + n]);
        self.fetched.fetch_add(n as u64, Ordering::Relaxed);
        Ok(())
    }
}

fn heap() -> Heap {
    Heap::new(HeapConfig {
        initial: 1 << 20,
        max: 64 << 20,
        tlab_bytes: 4096,
        grow_step: 1 << 20,
    })
    .unwrap()
}

fn longs(len: u32) -> Header {
    Header::Array {
        elem: Elem::I64,
        dims: 1,
        len,
    }
}

/// The test's arrays: word offset and the values they should hold.
type Model = Vec<(u32, Vec<u64>)>;

impl FakeDevice {
    /// Attach to `heap` as a mirror (the next one).
    fn attach(self: &Arc<Self>, heap: &Heap) -> MirrorId {
        let id = heap.attach_mirror(self.clone()).expect("room for a mirror");
        self.id.set(id).expect("attached once");
        id
    }

    fn id(&self) -> MirrorId {
        *self.id.get().expect("attached")
    }

    /// Receive what this device has not seen (as a launch's start does).
    fn sync(&self, heap: &Heap) {
        let runs = heap.take_device_stale(self.id(), 0..0).unwrap();
        let host = heap_bytes(heap);
        let mut dev = self.bytes.lock().unwrap();
        let want = heap.used() as usize;
        if dev.len() < want.next_multiple_of(CHUNK_BYTES) {
            dev.resize(want.next_multiple_of(CHUNK_BYTES), 0xAB);
        }
        for r in runs {
            dev[r.clone()].copy_from_slice(&host[r.clone()]);
            self.sent.fetch_add(r.len() as u64, Ordering::Relaxed);
        }
    }

    /// A kernel's store of `v` at byte `off`, marked as its dirty map
    /// would.
    fn store(&self, heap: &Heap, off: usize, v: u64) {
        self.bytes.lock().unwrap()[off..off + 8].copy_from_slice(&v.to_le_bytes());
        heap.device_wrote_chunk(self.id(), off >> CHUNK_SHIFT);
    }

    /// One launch, as the CUDA device runs it: carve a device eden, send
    /// what the host wrote, zero the eden on the device, apply the
    /// kernel's `writes` (array, element, value) and allocate `allocs`
    /// arrays of `len` longs on the device, mark what it wrote, and hand
    /// the eden's rest back.
    fn launch(
        &self,
        heap: &Heap,
        model: &mut Model,
        writes: &[(usize, usize, u64)],
        allocs: usize,
        len: u32,
    ) {
        let words = allocs as u32 * (len + 1) + 64;
        let (es, ee) = heap
            .carve_device_region(words, words, offload_abi::pages::MIXED, false)
            .unwrap();
        {
            let mut dev = self.bytes.lock().unwrap();
            // Whole chunks, as the CUDA device's image.
            let want = (ee as usize * 8).next_multiple_of(CHUNK_BYTES);
            if dev.len() < want {
                dev.resize(want, 0xAB);
            }
            // Taking the stale chunks may fetch other devices' writes
            // into the host's heap: read the host's bytes after.
            let runs = heap
                .take_device_stale(self.id(), es as usize * 8..ee as usize * 8)
                .unwrap();
            let host = heap_bytes(heap);
            for r in runs {
                dev[r.clone()].copy_from_slice(&host[r.clone()]);
                self.sent.fetch_add(r.len() as u64, Ordering::Relaxed);
            }
            dev[es as usize * 8..ee as usize * 8].fill(0);
            let mut dirty = vec![0u8; dev.len().div_ceil(CHUNK_BYTES)];
            for &(a, i, v) in writes {
                if model.is_empty() {
                    break;
                }
                let a = a % model.len();
                let (at, vals) = &mut model[a];
                let i = i % vals.len();
                vals[i] = v;
                let off = *at as usize * 8 + 8 + 8 * i;
                dev[off..off + 8].copy_from_slice(&v.to_le_bytes());
                dirty[off >> CHUNK_SHIFT] = 1;
            }
            let mut top = es;
            for _ in 0..allocs {
                let (a, b) = longs(len).encode().unwrap();
                let off = top as usize * 8;
                dev[off..off + 4].copy_from_slice(&a.to_le_bytes());
                dev[off + 4..off + 8].copy_from_slice(&b.to_le_bytes());
                model.push((top, vec![0; len as usize]));
                top += len + 1;
            }
            for (c, d) in dirty.iter().enumerate() {
                if *d != 0 {
                    heap.device_wrote_chunk(self.id(), c);
                }
            }
            heap.device_wrote(self.id(), es as usize * 8, top as usize * 8);
            assert!(heap.give_back(top, ee), "nothing else carves");
        }
    }
}

/// The heap's committed bytes (read only while nothing writes).
fn heap_bytes(heap: &Heap) -> &[u8] {
    // SAFETY: the test's heap is used by this thread only, and the slice
    // is dropped before the next write.
    unsafe { heap.host_bytes(0..heap.committed()) }.expect("committed")
}

#[derive(Clone, Debug)]
enum Op {
    HostWrite(usize, usize, u64),
    HostRead(usize, usize),
    HostAlloc(u32),
    Launch(Vec<(usize, usize, u64)>, usize, u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (any::<usize>(), any::<usize>(), any::<u64>()).prop_map(|(a, i, v)| Op::HostWrite(a, i, v)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, i)| Op::HostRead(a, i)),
        (1u32..20_000).prop_map(Op::HostAlloc),
        (
            prop::collection::vec((any::<usize>(), any::<usize>(), any::<u64>()), 0..20),
            0usize..4,
            1u32..20_000
        )
            .prop_map(|(w, n, l)| Op::Launch(w, n, l)),
    ]
}

/// Run `op` on `heap` (a launch on `dev`), keeping `model` in step; a host
/// read must find the model's value.
fn apply(heap: &Heap, model: &mut Model, dev: &FakeDevice, op: Op) -> Result<(), TestCaseError> {
    match op {
        Op::HostWrite(a, i, v) if !model.is_empty() => {
            let a = a % model.len();
            let (at, vals) = &mut model[a];
            let i = i % vals.len();
            vals[i] = v;
            heap.store64(*at as usize * 8 + 8 + 8 * i, v).unwrap();
        }
        Op::HostRead(a, i) if !model.is_empty() => {
            let (at, vals) = &model[a % model.len()];
            let i = i % vals.len();
            prop_assert_eq!(heap.load64(*at as usize * 8 + 8 + 8 * i).unwrap(), vals[i]);
        }
        Op::HostAlloc(len) => {
            let at = heap.alloc_direct(8 * (u64::from(len) + 1)).unwrap();
            heap.write_header(at, longs(len)).unwrap();
            model.push((at, vec![0; len as usize]));
        }
        Op::Launch(writes, allocs, len) => dev.launch(heap, model, &writes, allocs, len),
        _ => {}
    }
    Ok(())
}

fn check(heap: &Heap, model: &Model) {
    for (at, vals) in model {
        for (i, v) in vals.iter().enumerate() {
            let off = *at as usize * 8 + 8 + 8 * i;
            assert_eq!(heap.load64(off).unwrap(), *v, "array at word {at}, [{i}]");
        }
    }
    let st = heap.walk(|_, _| {}).unwrap();
    assert_eq!(st.arrays, model.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn host_and_device_see_each_others_writes(ops in prop::collection::vec(op(), 1..40)) {
        let heap = heap();
        let dev = Arc::new(FakeDevice::default());
        dev.attach(&heap);
        let mut model: Model = Vec::new();
        for op in ops {
            apply(&heap, &mut model, &dev, op)?;
        }
        check(&heap, &model);
        // And the device's image, once the host's writes are sent, holds
        // the same bytes.
        let top = heap.used() as usize;
        heap.sync_host().unwrap();
        let mut d = dev.bytes.lock().unwrap();
        if d.len() < top {
            d.resize(top, 0);
        }
        for r in heap.take_device_stale(dev.id(), 0..0).unwrap() {
            let r = r.start..r.end.min(top);
            d[r.clone()].copy_from_slice(&heap_bytes(&heap)[r]);
        }
        prop_assert!(d[..top] == heap_bytes(&heap)[..top]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Three devices launching in any order, with host reads, writes and
    /// allocations between: every value is where the model says, and each
    /// device, once sent what it lacks, holds the host's bytes.
    #[test]
    fn several_devices_see_each_others_writes(
        ops in prop::collection::vec((op(), 0usize..3), 1..40),
    ) {
        let heap = heap();
        let devs: Vec<Arc<FakeDevice>> = (0..3).map(|_| Arc::new(FakeDevice::default())).collect();
        for d in &devs {
            d.attach(&heap);
        }
        let mut model: Model = Vec::new();
        for (op, k) in ops {
            apply(&heap, &mut model, &devs[k], op)?;
        }
        check(&heap, &model);
        let top = heap.used() as usize;
        heap.sync_host().unwrap();
        for d in &devs {
            d.sync(&heap);
            let img = d.bytes.lock().unwrap();
            prop_assert!(img[..top] == heap_bytes(&heap)[..top]);
        }
    }
}

/// Two devices write different elements of one chunk between two fetches
/// (a launch split between them): the host's read merges both, the third
/// device is sent the merged chunk, and each writer is sent the other's
/// writes.
#[test]
fn writes_of_two_devices_to_one_chunk_all_land() {
    let heap = heap();
    let len = (2 * CHUNK_BYTES / 8) as u32;
    let at = heap.alloc_direct(8 * (u64::from(len) + 1)).unwrap();
    heap.write_header(at, longs(len)).unwrap();
    let devs: Vec<Arc<FakeDevice>> = (0..3).map(|_| Arc::new(FakeDevice::default())).collect();
    for d in &devs {
        d.attach(&heap);
        d.sync(&heap);
    }
    let elem = |i: usize| at as usize * 8 + 8 + 8 * i;
    // Elements 0..64, all in the chunk of element 0: even ones by device
    // 0, odd ones by device 1; and one byte-sized change (a value of 1
    // over 0) each, the smallest a merge must keep.
    let c = elem(0) / CHUNK_BYTES;
    assert_eq!(elem(63) / CHUNK_BYTES, c);
    for i in 0..64 {
        devs[i % 2].store(&heap, elem(i), if i < 2 { 1 } else { 1000 + i as u64 });
    }
    assert!(heap.is_host_stale(c));
    assert!(heap.is_device_stale(devs[2].id(), c));
    assert!(heap.is_device_stale(devs[0].id(), c) && heap.is_device_stale(devs[1].id(), c));
    let want = |i: usize| if i < 2 { 1 } else { 1000 + i as u64 };
    // Device 2's next launch fetches the chunk from both and gets it whole.
    devs[2].sync(&heap);
    assert!(!heap.is_host_stale(c));
    assert_eq!(
        devs[0].fetched.load(Ordering::Relaxed),
        CHUNK_BYTES as u64,
        "one chunk from each owner"
    );
    assert_eq!(devs[1].fetched.load(Ordering::Relaxed), CHUNK_BYTES as u64);
    for i in 0..64 {
        assert_eq!(heap.load64(elem(i)).unwrap(), want(i), "element {i}");
        let img = devs[2].bytes.lock().unwrap();
        assert_eq!(
            img[elem(i)..elem(i) + 8],
            want(i).to_le_bytes(),
            "device 2, element {i}"
        );
    }
    // Each writer lacks the other's writes: its next launch sends the chunk.
    for d in &devs[..2] {
        d.sync(&heap);
        let img = d.bytes.lock().unwrap();
        for i in 0..64 {
            assert_eq!(img[elem(i)..elem(i) + 8], want(i).to_le_bytes());
        }
    }
    // Nothing is left to send or fetch.
    for d in &devs {
        assert!(heap.take_device_stale(d.id(), 0..0).unwrap().is_empty());
    }
    assert_eq!(heap.residency().host_stale_chunks, 0);
}

/// Two devices wrote one chunk, and one of the writers is the first to be
/// sent it: it gets the merge — the other's writes with its own.
#[test]
fn a_writer_sent_a_chunk_two_devices_wrote_gets_the_others_writes() {
    let heap = heap();
    let len = (2 * CHUNK_BYTES / 8) as u32;
    let at = heap.alloc_direct(8 * (u64::from(len) + 1)).unwrap();
    heap.write_header(at, longs(len)).unwrap();
    let devs: Vec<Arc<FakeDevice>> = (0..2).map(|_| Arc::new(FakeDevice::default())).collect();
    for d in &devs {
        d.attach(&heap);
        d.sync(&heap);
    }
    let elem = |i: usize| at as usize * 8 + 8 + 8 * i;
    devs[0].store(&heap, elem(0), 10);
    devs[1].store(&heap, elem(1), 11);
    devs[0].sync(&heap);
    let img = devs[0].bytes.lock().unwrap();
    assert_eq!(img[elem(0)..elem(0) + 8], 10u64.to_le_bytes());
    assert_eq!(
        img[elem(1)..elem(1) + 8],
        11u64.to_le_bytes(),
        "device 1's write"
    );
    drop(img);
    assert_eq!(
        (heap.load64(elem(0)).unwrap(), heap.load64(elem(1)).unwrap()),
        (10, 11)
    );
}

/// A chunk one device wrote is fetched from it before another device is
/// sent it; the writer itself is not sent its own bytes back.
#[test]
fn a_device_is_sent_another_devices_writes_and_not_its_own() {
    let heap = heap();
    let len = (4 * CHUNK_BYTES / 8) as u32;
    let at = heap.alloc_direct(8 * (u64::from(len) + 1)).unwrap();
    heap.write_header(at, longs(len)).unwrap();
    let devs: Vec<Arc<FakeDevice>> = (0..2).map(|_| Arc::new(FakeDevice::default())).collect();
    for d in &devs {
        d.attach(&heap);
        d.sync(&heap);
        d.sent.store(0, Ordering::Relaxed);
    }
    let off = at as usize * 8 + 8 + 8 * 9000;
    devs[0].store(&heap, off, 77);
    // Device 0 has nothing to receive; device 1 gets exactly that chunk,
    // fetched from device 0 first.
    assert!(
        heap.take_device_stale(devs[0].id(), 0..0)
            .unwrap()
            .is_empty()
    );
    devs[1].sync(&heap);
    assert_eq!(devs[1].sent.load(Ordering::Relaxed), CHUNK_BYTES as u64);
    assert_eq!(devs[0].fetched.load(Ordering::Relaxed), CHUNK_BYTES as u64);
    assert_eq!(
        devs[1].bytes.lock().unwrap()[off..off + 8],
        77u64.to_le_bytes()
    );
    assert_eq!(heap.load64(off).unwrap(), 77);
    assert_eq!(
        devs[0].fetched.load(Ordering::Relaxed),
        CHUNK_BYTES as u64,
        "fetched once"
    );
}

#[test]
fn a_launch_sends_only_what_the_host_wrote_and_fetches_only_what_is_read() {
    let heap = heap();
    let dev = Arc::new(FakeDevice::default());
    // 8 chunks of longs.
    let len = (8 * CHUNK_BYTES / 8) as u32;
    let at = heap.alloc_direct(8 * (u64::from(len) + 1)).unwrap();
    heap.write_header(at, longs(len)).unwrap();
    dev.attach(&heap);
    let mut model: Model = vec![(at, vec![0; len as usize])];
    // The first launch sends the whole heap.
    dev.launch(&heap, &mut model, &[], 0, 1);
    let first = dev.sent.swap(0, Ordering::Relaxed);
    assert!(first >= 8 * CHUNK_BYTES as u64, "{first}");
    // Launches with no host writes between send nothing.
    for _ in 0..10 {
        dev.launch(&heap, &mut model, &[(0, 5, 9)], 0, 1);
    }
    assert_eq!(dev.sent.load(Ordering::Relaxed), 0);
    assert_eq!(dev.fetched.load(Ordering::Relaxed), 0);
    // One host write sends one chunk; reading one element fetches one.
    heap.store64(at as usize * 8 + 8 + 8 * 20_000, 3).unwrap();
    assert_eq!(heap.load64(at as usize * 8 + 8 + 8 * 5).unwrap(), 9);
    assert_eq!(dev.fetched.load(Ordering::Relaxed), CHUNK_BYTES as u64);
    dev.launch(&heap, &mut model, &[], 0, 1);
    assert_eq!(dev.sent.load(Ordering::Relaxed), CHUNK_BYTES as u64);
    model[0].1[20_000] = 3;
    check(&heap, &model);
}

#[test]
fn a_chunk_both_sides_wrote_keeps_the_devices_bytes() {
    let heap = heap();
    let dev = Arc::new(FakeDevice::default());
    let len = (4 * CHUNK_BYTES / 8) as u32;
    let at = heap.alloc_direct(8 * (u64::from(len) + 1)).unwrap();
    heap.write_header(at, longs(len)).unwrap();
    dev.attach(&heap);
    let mut model: Model = vec![(at, vec![0; len as usize])];
    dev.launch(&heap, &mut model, &[], 0, 1);
    // The host writes element 10 (chunk 0's neighbourhood) while a kernel
    // writes element 11 of the same chunk: both sides are stale there.
    heap.store64(at as usize * 8 + 8 + 8 * 10, 5).unwrap();
    let off = at as usize * 8 + 8 + 8 * 11;
    dev.bytes.lock().unwrap()[off..off + 8].copy_from_slice(&9u64.to_le_bytes());
    heap.device_wrote_chunk(dev.id(), off / CHUNK_BYTES);
    let c = off / CHUNK_BYTES;
    assert!(heap.is_host_stale(c) && heap.is_device_stale(dev.id(), c));
    // The next launch does not send the host's copy over the device's.
    let runs = heap.take_device_stale(dev.id(), 0..0).unwrap();
    assert!(
        runs.iter()
            .all(|r| r.end <= c * CHUNK_BYTES || r.start >= (c + 1) * CHUNK_BYTES),
        "{runs:?}"
    );
    assert_eq!(heap.load64(off).unwrap(), 9);
}
