//! Handing a launch's memory back to eden (`Allocator::reclaim`): only when
//! every carve since the allocator's mark was its own, and memory carved
//! again reads as zero.

use offload_heap::{AllocPolicy, Allocator, Heap, HeapConfig, layout::Header};
use offload_ir::Elem;

fn heap() -> Heap {
    Heap::new(HeapConfig {
        initial: 1 << 20,
        max: 256 << 20,
        tlab_bytes: 4096,
        grow_step: 1 << 20,
    })
    .unwrap()
}

fn ints(len: u32) -> Header {
    Header::Array {
        elem: Elem::I32,
        dims: 1,
        len,
    }
}

/// Allocate `n` arrays of 10 ints on worker `w` and fill them with 7s.
fn scribble(a: &Allocator<'_>, w: usize, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            let at = a.alloc(w, ints(10)).unwrap();
            for i in 0..10 {
                a.heap().store32(at as usize * 8 + 8 + 4 * i, 7).unwrap();
            }
            at
        })
        .collect()
}

#[test]
fn a_lone_allocator_hands_its_memory_back_and_it_is_zero_when_carved_again() {
    let heap = heap();
    let kept = Allocator::alloc_host(&heap, ints(4)).unwrap();
    let before = heap.used();
    let a = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 1 }, 2);
    assert!(a.young_start() > kept);
    let mut got = scribble(&a, 0, 500);
    got.extend(scribble(&a, 1, 500));
    // A direct (large) object counts as the allocator's own carve too.
    let big = a.alloc(0, ints(4000)).unwrap();
    assert!(got.iter().chain([&big]).all(|&r| r >= a.young_start()));
    let st = a.reclaim();
    assert!(st.reclaimed >= 1000 * 48, "{st:?}");
    assert_eq!(heap.used(), before, "top is back at the mark");
    assert_eq!(heap.reclaimed(), st.reclaimed);
    // The next launch gets the same memory, zeroed.
    let b = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 1 }, 2);
    let again: Vec<u32> = (0..1000).map(|_| b.alloc(0, ints(10)).unwrap()).collect();
    assert_eq!(again[0], got[0], "reused from the mark");
    for &at in &again {
        for i in 0..10 {
            assert_eq!(b.heap().load32(at as usize * 8 + 8 + 4 * i).unwrap(), 0);
        }
    }
    drop(b);
    let w = heap.walk(|_, _| {}).unwrap();
    assert_eq!(w.arrays, 1 + 1000, "the kept array and the second launch's");
}

#[test]
fn a_host_allocation_meanwhile_keeps_the_launch_memory() {
    let heap = heap();
    let a = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 1 }, 1);
    scribble(&a, 0, 100);
    let host = Allocator::alloc_host(&heap, ints(3)).unwrap();
    scribble(&a, 0, 100);
    let used = heap.used();
    assert_eq!(a.reclaim().reclaimed, 0);
    assert_eq!(heap.used(), used);
    assert_eq!(heap.header(offload_heap::Ref(host)).unwrap(), ints(3));
}

#[test]
fn overlapping_allocators_keep_each_others_memory() {
    let heap = heap();
    let a = Allocator::new(&heap, AllocPolicy::PrivateTlab, 1);
    let b = Allocator::new(&heap, AllocPolicy::PrivateTlab, 1);
    scribble(&a, 0, 100);
    let theirs = scribble(&b, 0, 100);
    assert_eq!(a.reclaim().reclaimed, 0, "b carved after a's mark");
    assert_eq!(b.reclaim().reclaimed, 0, "a carved after b's mark");
    for at in theirs {
        assert_eq!(heap.load32(at as usize * 8 + 8).unwrap(), 7);
    }
    // An allocator that carved nothing frees nothing.
    let c = Allocator::new(&heap, AllocPolicy::EdenCas, 1);
    assert_eq!(c.reclaim().reclaimed, 0);
}

#[test]
fn a_reclaim_between_anothers_mark_and_its_end_keeps_the_others_memory() {
    let heap = heap();
    let a = Allocator::new(&heap, AllocPolicy::PrivateTlab, 1);
    scribble(&a, 0, 100);
    // b's mark is above a's objects; a's reclaim then lowers top below it.
    let b = Allocator::new(&heap, AllocPolicy::PrivateTlab, 1);
    assert!(a.reclaim().reclaimed > 0);
    let theirs = scribble(&b, 0, 100);
    assert!(theirs[0] < b.young_start(), "b allocates below its mark");
    assert_eq!(b.reclaim().reclaimed, 0, "a's reclaim counts against b");
}

/// Launches that reclaim race with host allocations and with each other:
/// whatever a thread keeps must never be handed out again.
#[test]
fn racing_reclaims_never_free_what_others_keep() {
    let heap = heap();
    let keep: Vec<Vec<(u32, u32)>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u32)
            .map(|t| {
                let heap = &heap;
                s.spawn(move || {
                    let mut kept = Vec::new();
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(t);
                    for round in 0..300u32 {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        if t == 0 || seed.is_multiple_of(3) {
                            // A host allocation, tagged with its owner.
                            let at = Allocator::alloc_host(heap, ints(2)).unwrap();
                            let tag = t << 16 | round;
                            heap.store32(at as usize * 8 + 8, tag).unwrap();
                            kept.push((at, tag));
                        } else {
                            // A launch whose objects all die with it.
                            let a = Allocator::new(heap, AllocPolicy::PrivateTlab, 1);
                            for _ in 0..(seed % 200) {
                                let at = a.alloc(0, ints(6)).unwrap();
                                heap.store32(at as usize * 8 + 8, u32::MAX).unwrap();
                            }
                            a.reclaim();
                        }
                    }
                    kept
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (at, tag) in keep.into_iter().flatten() {
        assert_eq!(heap.header(offload_heap::Ref(at)).unwrap(), ints(2));
        assert_eq!(
            heap.load32(at as usize * 8 + 8).unwrap(),
            tag,
            "object at {at}"
        );
    }
    heap.walk(|_, _| {}).unwrap();
    assert!(heap.reclaimed() > 0, "some launches ran alone");
}
