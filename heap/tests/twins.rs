//! Twins (`offload_heap::twins`): in twin mode, device parts that write a
//! chunk while host code (replays, compiled code on a raw image) and other
//! devices write other elements of it all keep their writes, whatever the
//! order of the sends, the writes, the marks and the fetches.

use offload_heap::resident::{CHUNK_BYTES, CHUNK_SHIFT};
use offload_heap::{Heap, HeapConfig, Mirror, MirrorId, layout::Header};
use offload_ir::Elem;
use proptest::prelude::*;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};

/// A device's heap image in host memory.
#[derive(Default)]
struct Dev {
    bytes: Mutex<Vec<u8>>,
    id: OnceLock<MirrorId>,
    /// The part registered now, if any.
    token: Mutex<Option<u64>>,
    /// Run once after the next fetch has read the image: the device's
    /// kernel going on meanwhile.
    after_fetch: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Mirror for Dev {
    fn fetch(&self, at: usize, dst: &mut [u8]) -> Result<(), String> {
        {
            let b = self.bytes.lock().unwrap();
            let n = dst.len().min(b.len().saturating_sub(at));
            dst[..n].copy_from_slice(&b[at..at + n]);
        }
        if let Some(f) = self.after_fetch.lock().unwrap().take() {
            f();
        }
        Ok(())
    }
}

impl Dev {
    fn attach(heap: &Heap) -> Arc<Dev> {
        let d = Arc::new(Dev::default());
        let id = heap.attach_mirror(d.clone()).expect("room for a mirror");
        d.id.set(id).unwrap();
        d.bytes
            .lock()
            .unwrap()
            .resize(heap.committed().next_multiple_of(CHUNK_BYTES), 0xAB);
        d
    }

    fn id(&self) -> MirrorId {
        *self.id.get().unwrap()
    }

    /// Start (or go on with) a part that may write `chunks`: what it lacks
    /// is sent, from twins.
    fn begin(&self, heap: &Heap, chunks: &[Range<usize>]) {
        let mut token = self.token.lock().unwrap();
        let (t, _) = heap
            .send_for_write(self.id(), chunks, 0..0, *token, &mut |runs| {
                let mut dev = self.bytes.lock().unwrap();
                for (at, b) in runs {
                    dev[*at..*at + b.len()].copy_from_slice(b);
                }
                Ok(())
            })
            .unwrap();
        *token = Some(t);
    }

    /// The kernel's store (not marked until [`Dev::mark`]).
    fn write(&self, off: usize, v: u64) {
        self.bytes.lock().unwrap()[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The round's end: its dirty map marked.
    fn mark(&self, heap: &Heap, offs: &[usize]) {
        for off in offs {
            heap.device_wrote_chunk(self.id(), off >> CHUNK_SHIFT);
        }
    }

    fn end(&self, heap: &Heap) {
        if let Some(t) = self.token.lock().unwrap().take() {
            heap.end_write(t);
        }
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

/// An array of `len` longs; the byte offset of its element `i`, and its
/// chunks.
fn array(heap: &Heap, len: u32) -> (impl Fn(usize) -> usize, Range<usize>) {
    let at = heap.alloc_direct(8 * (u64::from(len) + 1)).unwrap();
    heap.write_header(
        at,
        Header::Array {
            elem: Elem::I64,
            dims: 1,
            len,
        },
    )
    .unwrap();
    let elem = move |i: usize| at as usize * 8 + 8 + 8 * i;
    let chunks = elem(0) / CHUNK_BYTES..(elem(len as usize - 1) + 8).div_ceil(CHUNK_BYTES);
    (elem, chunks)
}

#[test]
fn a_host_store_beside_a_writing_part_lands() {
    let heap = heap();
    let (elem, chunks) = array(&heap, 64);
    let dev = Dev::attach(&heap);
    let _on = heap.twin_mode();
    dev.begin(&heap, std::slice::from_ref(&chunks));
    dev.write(elem(0), 7);
    // A replay of another part stores element 1 while the kernel runs.
    heap.store64(elem(1), 9).unwrap();
    dev.write(elem(2), 11);
    dev.mark(&heap, &[elem(0), elem(2)]);
    dev.end(&heap);
    assert_eq!(heap.load64(elem(0)).unwrap(), 7);
    assert_eq!(
        heap.load64(elem(1)).unwrap(),
        9,
        "the host's store survives"
    );
    assert_eq!(heap.load64(elem(2)).unwrap(), 11);
    // The device lacks the host's store: its next part is sent it.
    dev.begin(&heap, std::slice::from_ref(&chunks));
    let img = dev.bytes.lock().unwrap();
    assert_eq!(img[elem(1)..elem(1) + 8], 9u64.to_le_bytes());
    drop(img);
    dev.end(&heap);
    assert_eq!(heap.twins_kept(), 0, "no twin outlives what it was for");
}

#[test]
fn a_fetch_between_two_devices_marks_keeps_both() {
    let heap = heap();
    let (elem, chunks) = array(&heap, 64);
    let (a, b) = (Dev::attach(&heap), Dev::attach(&heap));
    let _on = heap.twin_mode();
    a.begin(&heap, std::slice::from_ref(&chunks));
    b.begin(&heap, std::slice::from_ref(&chunks));
    a.write(elem(0), 1);
    b.write(elem(1), 2);
    a.mark(&heap, &[elem(0)]);
    // A host read between the marks fetches `a`'s chunk alone ...
    assert_eq!(heap.load64(elem(0)).unwrap(), 1);
    b.mark(&heap, &[elem(1)]);
    // ... and `b`'s, fetched later, keeps it.
    assert_eq!(heap.load64(elem(1)).unwrap(), 2);
    assert_eq!(
        heap.load64(elem(0)).unwrap(),
        1,
        "the first device's write survives"
    );
    a.end(&heap);
    b.end(&heap);
    assert_eq!(heap.twins_kept(), 0);
}

/// Another device's thread fetches a chunk (to send it to its own part)
/// while a kernel writing other elements of it goes on: what the kernel
/// writes and marks after its image was read stays the device's, and lands
/// at the next fetch — the fetch does not clear an owner that marked the
/// chunk while it ran (its part may end before that next fetch).
#[test]
fn a_kernel_that_marks_while_its_chunk_is_fetched_keeps_its_writes() {
    let heap = Arc::new(heap());
    let (elem, chunks) = array(&heap, 64);
    let a = Dev::attach(&heap);
    let b = Dev::attach(&heap);
    let _on = heap.twin_mode();
    a.begin(&heap, std::slice::from_ref(&chunks));
    b.begin(&heap, std::slice::from_ref(&chunks));
    a.write(elem(0), 7);
    a.mark(&heap, &[elem(0)]);
    b.write(elem(1), 8);
    b.mark(&heap, &[elem(1)]);
    {
        let (a2, h2) = (a.clone(), heap.clone());
        let e2 = elem(2);
        *a.after_fetch.lock().unwrap() = Some(Box::new(move || {
            a2.write(e2, 9);
            a2.mark(&h2, &[e2]);
        }));
    }
    // B's next part: its stale chunk is fetched (merging A's and B's
    // writes), A's kernel writing element 2 meanwhile.
    b.end(&heap);
    b.begin(&heap, std::slice::from_ref(&chunks));
    a.end(&heap);
    assert!(
        heap.is_host_stale(chunks.start),
        "A's late write is still only on A"
    );
    b.end(&heap);
    for (i, want) in [(0, 7), (1, 8), (2, 9)] {
        assert_eq!(heap.load64(elem(i)).unwrap(), want, "element {i}");
    }
    assert_eq!(heap.twins_kept(), 0);
}

/// A part that sets an element, is fetched (a replay reads it), and sets
/// it back to the value it was sent: the host ends with that last value.
/// Merged against the twin the part was sent, the element would not
/// differ, and the host would keep the value of the first fetch.
#[test]
fn a_part_that_sets_an_element_back_after_a_fetch_keeps_the_last_value() {
    let heap = heap();
    let (elem, chunks) = array(&heap, 64);
    heap.store64(elem(0), 5).unwrap();
    let dev = Dev::attach(&heap);
    let _on = heap.twin_mode();
    dev.begin(&heap, std::slice::from_ref(&chunks));
    dev.write(elem(0), 6);
    dev.mark(&heap, &[elem(0)]);
    assert_eq!(heap.load64(elem(0)).unwrap(), 6);
    // The part's next round: nothing stale to send; it writes 5 again.
    dev.begin(&heap, std::slice::from_ref(&chunks));
    dev.write(elem(0), 5);
    dev.mark(&heap, &[elem(0)]);
    dev.end(&heap);
    assert_eq!(heap.load64(elem(0)).unwrap(), 5);
    assert_eq!(heap.twins_kept(), 0);
}

#[test]
fn a_raw_image_beside_a_writing_part_keeps_both() {
    let heap = heap();
    let (elem, chunks) = array(&heap, 64);
    let dev = Dev::attach(&heap);
    let _on = heap.twin_mode();
    dev.begin(&heap, std::slice::from_ref(&chunks));
    {
        let raw = heap.raw_image().unwrap();
        // SAFETY: an element of a live array, written by this thread only.
        unsafe { (raw.base_ptr().add(elem(3)) as *mut u64).write_unaligned(33) };
        dev.write(elem(4), 44);
        dev.mark(&heap, &[elem(4)]);
    }
    dev.end(&heap);
    assert_eq!(heap.load64(elem(3)).unwrap(), 33);
    assert_eq!(heap.load64(elem(4)).unwrap(), 44);
}

/// Who writes element `i` of the test's arrays: one writer per element,
/// as a launch's workitems own theirs.
fn writer_of(i: usize, writers: usize) -> usize {
    (i * 7 + i / 5) % writers
}

#[derive(Clone, Debug)]
enum Step {
    /// Device `d` starts a part (or sends again, as a wait in place does).
    Begin(usize),
    /// Writer `w` writes its element `i` with `v` (a device's kernel, or
    /// the host: a replay's store).
    Write(usize, usize, u64),
    /// Device `d` marks what it wrote.
    Mark(usize),
    /// A host read of element `i`.
    Read(usize),
    /// Device `d`'s part ends (after a mark).
    End(usize),
}

fn step(devs: usize, elems: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..devs).prop_map(Step::Begin),
        (0..=devs, 0..elems, any::<u64>()).prop_map(|(w, i, v)| Step::Write(w, i, v)),
        (0..devs).prop_map(Step::Mark),
        (0..elems).prop_map(Step::Read),
        (0..devs).prop_map(Step::End),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Three devices and the host write their own elements of a few chunks
    /// in any interleaving of sends, writes, marks, reads and ends: every
    /// write lands, and a read sees the last value written once it is
    /// marked (or at once, for the host's).
    #[test]
    fn every_writer_keeps_its_writes(steps in prop::collection::vec(step(3, 3 * 8192 + 64), 1..80)) {
        let heap = heap();
        let n = 3 * 8192 + 64;
        let (elem, chunks) = array(&heap, n as u32);
        let devs: Vec<Arc<Dev>> = (0..3).map(|_| Dev::attach(&heap)).collect();
        let on = heap.twin_mode();
        let host = devs.len();
        let mut want = vec![0u64; n];
        // Per device: whether a part runs, and the writes it has not marked.
        let mut running = [false; 3];
        let mut pending: [Vec<(usize, u64)>; 3] = Default::default();
        for s in steps {
            match s {
                // A device is sent chunks only with its writes marked (a
                // wait in place reads the dirty map first).
                Step::Begin(d) if pending[d].is_empty() => {
                    devs[d].begin(&heap, std::slice::from_ref(&chunks));
                    running[d] = true;
                }
                Step::Write(w, i, v) if writer_of(i, host + 1) == w => {
                    if w == host {
                        heap.store64(elem(i), v).unwrap();
                        want[i] = v;
                    } else if running[w] {
                        devs[w].write(elem(i), v);
                        pending[w].push((i, v));
                    }
                }
                Step::Write(..) | Step::Begin(_) => {}
                Step::Mark(d) => {
                    let offs: Vec<usize> = pending[d].iter().map(|&(i, _)| elem(i)).collect();
                    devs[d].mark(&heap, &offs);
                    for (i, v) in pending[d].drain(..) {
                        want[i] = v;
                    }
                }
                Step::Read(i) => {
                    let w = writer_of(i, host + 1);
                    if w == host || pending[w].iter().all(|&(j, _)| j != i) {
                        prop_assert_eq!(heap.load64(elem(i)).unwrap(), want[i], "element {}", i);
                    }
                }
                Step::End(d) => {
                    if running[d] && pending[d].is_empty() {
                        devs[d].end(&heap);
                        running[d] = false;
                    }
                }
            }
        }
        for d in 0..3 {
            let offs: Vec<usize> = pending[d].iter().map(|&(i, _)| elem(i)).collect();
            devs[d].mark(&heap, &offs);
            for (i, v) in pending[d].drain(..) {
                want[i] = v;
            }
            devs[d].end(&heap);
        }
        drop(on);
        for (i, w) in want.iter().enumerate() {
            prop_assert_eq!(heap.load64(elem(i)).unwrap(), *w, "element {}", i);
        }
        // Every device's next launch gets the host's bytes.
        for d in &devs {
            d.begin(&heap, std::slice::from_ref(&chunks));
            let img = d.bytes.lock().unwrap();
            for (i, w) in want.iter().enumerate() {
                prop_assert_eq!(&img[elem(i)..elem(i) + 8], &w.to_le_bytes()[..]);
            }
            drop(img);
            d.end(&heap);
        }
        prop_assert_eq!(heap.twins_kept(), 0);
    }
}

#[test]
fn a_part_begun_beside_a_raw_image_is_sent_all_its_chunks() {
    let heap = heap();
    let (elem, chunks) = array(&heap, 64);
    let dev = Dev::attach(&heap);
    // The device has the heap.
    dev.begin(&heap, std::slice::from_ref(&chunks));
    dev.end(&heap);
    let _on = heap.twin_mode();
    {
        let raw = heap.raw_image().unwrap();
        // SAFETY: an element of a live array, written by this thread only.
        unsafe { (raw.base_ptr().add(elem(3)) as *mut u64).write_unaligned(33) };
        // Begun while compiled host code writes unmarked: the device's
        // image may be old anywhere, and all of its chunks go.
        dev.begin(&heap, std::slice::from_ref(&chunks));
        dev.write(elem(4), 44);
        dev.mark(&heap, &[elem(4)]);
    }
    dev.end(&heap);
    assert_eq!(heap.load64(elem(3)).unwrap(), 33);
    assert_eq!(heap.load64(elem(4)).unwrap(), 44);
}

/// A raw image of some chunks (`Heap::raw_image_touching`: a CPU part of
/// a split launch whose kernel writes only its workitems' own elements):
/// a part begun beside it is sent, besides its stale chunks, only those of
/// its chunks the image may write unmarked — not every chunk, as beside an
/// image of the whole heap — and both sides' writes land.
#[test]
fn a_part_begun_beside_a_raw_image_of_some_chunks_is_sent_those() {
    let heap = heap();
    // Three chunks of longs and more.
    let per = CHUNK_BYTES / 8;
    let (elem, chunks) = array(&heap, 3 * per as u32 + 8);
    let dev = Dev::attach(&heap);
    dev.begin(&heap, std::slice::from_ref(&chunks));
    dev.end(&heap);
    let _on = heap.twin_mode();
    let (host_at, dev_at) = (elem(8), elem(2 * per + 8));
    let host_chunk = host_at / CHUNK_BYTES;
    {
        let writes = std::iter::once(host_chunk..host_chunk + 1).collect();
        let raw = heap.raw_image_touching(&[], writes).unwrap();
        // SAFETY: an element of a live array, written by this thread only.
        unsafe { (raw.base_ptr().add(host_at) as *mut u64).write_unaligned(33) };
        let mut sent = Vec::new();
        let mut token = dev.token.lock().unwrap();
        let (t, _) = heap
            .send_for_write(
                dev.id(),
                std::slice::from_ref(&chunks),
                0..0,
                *token,
                &mut |runs| {
                    let mut d = dev.bytes.lock().unwrap();
                    for (at, b) in runs {
                        d[*at..*at + b.len()].copy_from_slice(b);
                        sent.push(*at / CHUNK_BYTES..(*at + b.len()).div_ceil(CHUNK_BYTES));
                    }
                    Ok(())
                },
            )
            .unwrap();
        *token = Some(t);
        drop(token);
        assert_eq!(sent, vec![host_chunk..host_chunk + 1], "chunks sent");
        dev.write(dev_at, 44);
        dev.mark(&heap, &[dev_at]);
    }
    dev.end(&heap);
    assert_eq!(heap.load64(host_at).unwrap(), 33);
    assert_eq!(heap.load64(dev_at).unwrap(), 44);
}

/// A raw image that drops while a part's send runs — its marks landing
/// after the send looked for stale chunks — still has the chunks it wrote
/// sent to the part: the send takes what live images may write before it
/// looks. Looked for after, the image was gone and its marks not seen, the
/// part wrote over an old image of the chunk with no twin, and its fetch
/// put the old bytes back over the host's write (a CPU part of a split
/// launch one launch behind in the chunk it shares with a GPU part).
#[test]
fn a_raw_image_that_drops_during_a_send_has_its_chunks_sent() {
    use std::sync::mpsc::channel;
    let heap = heap();
    let per = CHUNK_BYTES / 8;
    let (elem, chunks) = array(&heap, 3 * per as u32 + 8);
    let (dev, other) = (Dev::attach(&heap), Dev::attach(&heap));
    dev.begin(&heap, std::slice::from_ref(&chunks));
    dev.end(&heap);
    // The other device wrote a chunk of the array: the part's send fetches
    // it (from the other device) before sending it.
    let other_at = elem(2 * per + 8);
    other.begin(&heap, std::slice::from_ref(&chunks));
    other.write(other_at, 55);
    other.mark(&heap, &[other_at]);
    other.end(&heap);
    let _on = heap.twin_mode();
    let (host_at, dev_at) = (elem(8), elem(16));
    let host_chunk = host_at / CHUNK_BYTES;
    let (drop_now, drop_when) = channel::<()>();
    let (dropped, dropped_when) = channel::<()>();
    let (ready, ready_when) = channel::<()>();
    std::thread::scope(|s| {
        let (heap, elem8) = (&heap, host_at);
        s.spawn(move || {
            let writes = std::iter::once(host_chunk..host_chunk + 1).collect();
            let raw = heap.raw_image_touching(&[], writes).unwrap();
            // SAFETY: an element of a live array, written by this thread
            // only.
            unsafe { (raw.base_ptr().add(elem8) as *mut u64).write_unaligned(33) };
            ready.send(()).unwrap();
            drop_when.recv().unwrap();
            drop(raw);
            dropped.send(()).unwrap();
        });
        // The image drops while the send fetches the other device's chunk.
        *other.after_fetch.lock().unwrap() = Some(Box::new(move || {
            drop_now.send(()).unwrap();
            dropped_when.recv().unwrap();
        }));
        // The image is out and written before the send begins.
        ready_when.recv().unwrap();
        dev.begin(heap, std::slice::from_ref(&chunks));
    });
    assert!(
        other.after_fetch.lock().unwrap().is_none(),
        "the send fetched the other device's chunk"
    );
    assert_eq!(
        dev.bytes.lock().unwrap()[host_at..host_at + 8],
        33u64.to_le_bytes(),
        "the part is sent the host's write"
    );
    dev.write(dev_at, 44);
    dev.mark(&heap, &[dev_at]);
    dev.end(&heap);
    assert_eq!(heap.load64(host_at).unwrap(), 33, "the host's write kept");
    assert_eq!(heap.load64(dev_at).unwrap(), 44);
    assert_eq!(heap.load64(other_at).unwrap(), 55);
}

/// A device eden carved in twin mode (a split launch's GPU part) over
/// memory that held objects before: the host's bytes of it in its two edge
/// chunks — which it shares with what lies around it, and which are sent
/// from the host's bytes — are zeroed and go to the device, like the
/// device's own zeroed eden; the chunks wholly inside are the device's
/// alone and are never sent, even by a send while a raw image is live
/// (which sends a part all of its chunks): that would put old bytes where
/// the kernel has not allocated yet.
#[test]
fn a_device_eden_carved_in_twin_mode_is_zero_where_it_is_sent() {
    let heap = heap();
    let _small = array(&heap, 100);
    let dev = Dev::attach(&heap);
    let words = (3 * CHUNK_BYTES / 8) as u32;
    let mixed = offload_abi::pages::MIXED;
    // Old objects: a region written and handed back.
    let (s, e) = heap
        .carve_device_region(words, words, mixed, false)
        .unwrap();
    let eden = s as usize * 8..e as usize * 8;
    {
        let raw = heap.raw_image().unwrap();
        // SAFETY: the region carved just above, this thread's alone.
        unsafe { std::ptr::write_bytes(raw.base_ptr().add(eden.start), 0xCD, eden.len()) };
    }
    assert!(heap.give_back(s, e));
    // The device has the heap.
    let all = 0..heap.committed().div_ceil(CHUNK_BYTES);
    dev.begin(&heap, std::slice::from_ref(&all));
    dev.end(&heap);
    let _on = heap.twin_mode();
    let (s2, e2) = heap
        .carve_device_region(words, words, mixed, false)
        .unwrap();
    assert_eq!((s2, e2), (s, e));
    let (first, last) = (eden.start / CHUNK_BYTES, (eden.end - 1) / CHUNK_BYTES);
    assert!(last >= first + 2, "an eden of three chunks has one inside");
    let inside = first + 1..last;
    let host = |at: usize| heap.load64(at).unwrap();
    // Zero where it shares a chunk with what lies around it, and sent.
    assert_eq!(host(eden.start), 0);
    assert_eq!(host(eden.end - 8), 0);
    assert!(heap.is_device_stale(dev.id(), first) && heap.is_device_stale(dev.id(), last));
    // Inside: the old bytes stay on the host (the device zeroes its copy).
    assert_eq!(host(inside.start * CHUNK_BYTES), 0xCDCD_CDCD_CDCD_CDCD);
    // The part registers the eden, and is sent the edges only.
    let part = first..last + 1;
    dev.bytes.lock().unwrap()[eden.clone()].fill(0);
    let mut sent = Vec::new();
    let send = |dev: &Dev, sent: &mut Vec<usize>, token: Option<u64>| {
        heap.send_for_write(
            dev.id(),
            std::slice::from_ref(&part),
            inside.clone(),
            token,
            &mut |runs| {
                let mut b = dev.bytes.lock().unwrap();
                for (at, bytes) in runs {
                    sent.push(at / CHUNK_BYTES);
                    b[*at..*at + bytes.len()].copy_from_slice(bytes);
                }
                Ok(())
            },
        )
        .unwrap()
        .0
    };
    let token = send(&dev, &mut sent, None);
    assert!(!sent.iter().any(|c| inside.contains(c)), "sent {sent:?}");
    // The kernel allocates in the inside chunk and the last edge.
    let obj = inside.start * CHUNK_BYTES + 64;
    dev.write(obj, 7);
    dev.write(eden.end - 16, 9);
    dev.mark(&heap, &[obj, eden.end - 16]);
    {
        // A raw image live (a CPU part): a send now sends every chunk of
        // the part but the inside ones.
        let _raw = heap.raw_image().unwrap();
        sent.clear();
        send(&dev, &mut sent, Some(token));
        assert!(!sent.iter().any(|c| inside.contains(c)), "sent {sent:?}");
        assert!(
            sent.contains(&first) && sent.contains(&last),
            "sent {sent:?}"
        );
    }
    // The device's bytes beyond what it allocated are still its zeroes.
    let b = dev.bytes.lock().unwrap()[obj + 8..obj + 16].to_vec();
    assert_eq!(b, [0; 8]);
    heap.end_write(token);
    assert_eq!(host(obj), 7);
    assert_eq!(host(obj + 8), 0);
    assert_eq!(host(eden.end - 16), 9);
}

/// The raw image of compiled code that reads and writes its arrays and
/// allocates (`Heap::raw_image_allocating`): what a device wrote below
/// eden's top outside the arrays is not fetched (a CPU part of a split
/// launch fetched every object the GPUs' parts had made), and only the
/// arrays and what lies above the top count as written when it drops —
/// unless the top came down meanwhile (a collection moved objects), when
/// all of the heap does.
#[test]
fn an_allocating_raw_image_leaves_what_lies_below_the_top_alone() {
    let heap = heap();
    let (elem, chunks) = array(&heap, 64);
    // Another array, in chunks of its own, which a device writes.
    let (other, other_chunks) = array(&heap, 3 * (CHUNK_BYTES / 8) as u32);
    let dev = Dev::attach(&heap);
    let all = 0..heap.committed().div_ceil(CHUNK_BYTES);
    dev.begin(&heap, std::slice::from_ref(&all));
    dev.end(&heap);
    let mid = other(CHUNK_BYTES / 8 + 5);
    let c_mid = mid / CHUNK_BYTES;
    assert!(!chunks.contains(&c_mid) && other_chunks.contains(&c_mid));
    dev.write(mid, 77);
    dev.mark(&heap, &[mid]);
    let top_chunk = heap.used() as usize / CHUNK_BYTES;
    assert!(c_mid < top_chunk, "the written chunk lies below the top");
    {
        let raw = heap.raw_image_allocating(vec![chunks.clone()]).unwrap();
        // SAFETY: an element of a live array, written by this thread only.
        unsafe { (raw.base_ptr().add(elem(1)) as *mut u64).write_unaligned(11) };
        assert!(
            heap.is_host_stale(c_mid),
            "fetched what the code cannot reach"
        );
    }
    assert!(heap.is_device_stale(dev.id(), chunks.start));
    assert!(heap.is_device_stale(dev.id(), top_chunk));
    assert!(!heap.is_device_stale(dev.id(), c_mid));
    assert_eq!(heap.load64(mid).unwrap(), 77);
    // The top comes down while an image is live: everything is written.
    let words = 64;
    let (s, e) = heap
        .carve_device_region(words, words, offload_abi::pages::MIXED, false)
        .unwrap();
    let low = other(2) / CHUNK_BYTES;
    dev.begin(&heap, std::slice::from_ref(&all));
    dev.end(&heap);
    assert!(!heap.is_device_stale(dev.id(), low));
    {
        let _raw = heap.raw_image_allocating(vec![chunks.clone()]).unwrap();
        assert!(heap.give_back(s, e));
    }
    assert!(heap.is_device_stale(dev.id(), low));
    assert_eq!(heap.load64(elem(1)).unwrap(), 11);
}
