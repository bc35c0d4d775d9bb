//! Tests of the launch allocator: placement by kind, TLAB sizes, buffers,
//! refill failures and exhaustion.

use super::*;
use crate::heap::HeapConfig;
use offload_ir::Elem;

fn heap(max: usize) -> Heap {
    Heap::new(HeapConfig {
        initial: 64 << 10,
        max,
        tlab_bytes: 1024,
        grow_step: 64 << 10,
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

#[test]
fn a_tagged_allocator_carves_pages_of_its_tag_and_places_other_tags_apart() {
    use offload_abi::pages::{ARRAYS, MIXED};
    let h = heap(64 << 20);
    let point = Header::Object { class: 7, size: 24 };
    let a = Allocator::new(&h, AllocPolicy::default(), 4).with_kinds(&[7]);
    let mut points = Vec::new();
    for w in 0..4 {
        for _ in 0..500 {
            points.push(a.alloc(w, point).unwrap());
        }
    }
    // An array, small and large, through the same allocator: never in
    // the class's TLABs.
    let small = a.alloc(0, ints(4)).unwrap();
    let large = a.alloc(1, ints(1 << 16)).unwrap();
    let other = a.alloc(2, Header::Object { class: 8, size: 16 }).unwrap();
    a.retire();
    for &p in &points {
        assert_eq!(h.pages().tag_of(p), 7, "point at word {p}");
    }
    assert_eq!(h.pages().tag_of(small), ARRAYS);
    assert_eq!(h.pages().tag_of(large), ARRAYS);
    assert_eq!(h.pages().tag_of(other), 8);
    h.check_pages().unwrap();
    // Untagged (several kinds): mixed pages, large objects too.
    let m = Allocator::new(&h, AllocPolicy::default(), 2);
    let (x, y) = (m.alloc(0, point).unwrap(), m.alloc(1, ints(4)).unwrap());
    let big = m.alloc(0, ints(1 << 16)).unwrap();
    m.retire();
    assert_eq!((h.pages().tag_of(x), h.pages().tag_of(y)), (MIXED, MIXED));
    assert_eq!(h.pages().tag_of(big), MIXED);
    h.check_pages().unwrap();
}

#[test]
fn class_kinds_take_smaller_tlabs_than_the_mixed_kind() {
    use offload_abi::pages::{MIXED, PAGE_WORDS};
    // Room for every refill below without growing (a carve at the
    // heap's end takes what is left).
    let h = Heap::new(HeapConfig {
        initial: 1 << 20,
        max: 64 << 20,
        tlab_bytes: 1024,
        grow_step: 1 << 20,
    })
    .unwrap();
    let a = Allocator::new(&h, AllocPolicy::PrivateTlab, 1)
        .with_tlab_bytes(32 << 10)
        .with_kinds(&[MIXED, 7]);
    let p = a.alloc(0, Header::Object { class: 7, size: 24 }).unwrap();
    let x = a.alloc(0, ints(4)).unwrap();
    assert_eq!(a.kind_of(Header::Object { class: 9, size: 16 }), Some(0));
    let span = |kind: usize| {
        let (top, end) = a.tlab_for(0, kind).unwrap().bounds();
        end - top
    };
    let (class_span, mixed_span) = (span(1) + 3, span(0) + 3);
    // A page first (a carve may end early, on a page boundary), then
    // twice as much at each refill of the kind.
    assert!(
        class_span <= PAGE_WORDS && class_span > PAGE_WORDS / 2,
        "{class_span}"
    );
    assert!(mixed_span > a.tlab_words() / 2, "{mixed_span}");
    let mut carved = vec![class_span];
    for _ in 0..5 {
        let before = a.tlab_for(0, 1).unwrap().refills();
        let mut last = 0;
        while a.tlab_for(0, 1).unwrap().refills() == before {
            last = a.alloc(0, Header::Object { class: 7, size: 24 }).unwrap();
        }
        let (_, end) = a.tlab_for(0, 1).unwrap().bounds();
        carved.push(end - last);
    }
    assert_eq!(
        carved[1..],
        [2, 4, 8, 16, 16].map(|n| (n * PAGE_WORDS).min(a.tlab_words())),
        "{carved:?}"
    );
    a.retire();
    assert_eq!((h.pages().tag_of(p), h.pages().tag_of(x)), (7, MIXED));
    h.check_pages().unwrap();
}

#[test]
fn large_host_arrays_are_placed_apart() {
    let h = heap(64 << 20);
    let big = ints(1 << 20); // 4 MiB and 8 bytes of header
    let size = words(big.size().unwrap()) as u32;
    let (x, y) = (
        Allocator::alloc_host(&h, big).unwrap(),
        Allocator::alloc_host(&h, big).unwrap(),
    );
    let gap = words(COLOUR_GAP_BYTES) as u32;
    // Elements on a cache line, and the gap right before each.
    assert_eq!(
        ((x + 1) % 8, (y + 1) % 8),
        (0, 0),
        "x at word {x}, y at word {y}"
    );
    let slack = (ALIGN_SLACK_BYTES / 8) as u32;
    assert!(
        (size + gap..=size + gap + 2 * slack).contains(&(y - x)),
        "x {x}, y {y}"
    );
    let gap_filler = Header::Filler {
        size: COLOUR_GAP_BYTES as u32,
    };
    assert_eq!(h.header(crate::layout::Ref(y - gap)).unwrap(), gap_filler);
    // A small array follows within the slack; the heap walks over the
    // fillers (gap, padding and the rest of the slack).
    let small = Allocator::alloc_host(&h, ints(8)).unwrap();
    assert!(
        (y + size..y + size + slack).contains(&small),
        "small at {small}"
    );
    let mut seen = Vec::new();
    let st = h.walk(|r, hd| seen.push((r.0, hd))).unwrap();
    assert_eq!(st.arrays, 3, "{seen:?}");
    // (The small array opens the host's run of array pages, which
    // ends on a page boundary; its rest is one filler.)
    let page = offload_abi::pages::PAGE_WORDS;
    let run_end = (small + 5).next_multiple_of(page);
    let run_end = if run_end - small < page / 2 {
        run_end + page
    } else {
        run_end
    };
    assert_eq!(
        st.filler_bytes,
        2 * (COLOUR_GAP_BYTES + ALIGN_SLACK_BYTES) + u64::from(run_end - small - 5) * 8,
        "{seen:?}"
    );
    assert_eq!(h.header(crate::layout::Ref(y)).unwrap(), big);
    // With no room for the gap, the array still fits without one, its
    // elements on a line (padding before it, the rest of the slack
    // after).
    let tight = heap(4 << 20);
    let len = (((4 << 20) - 4096) / 4) as u32;
    let at = Allocator::alloc_host(&tight, ints(len)).unwrap();
    assert_eq!(tight.header(crate::layout::Ref(at)).unwrap(), ints(len));
    assert_eq!((at + 1) % 8, 0, "elements on a line");
    let walk = tight.walk(|_, _| ()).unwrap();
    assert!(walk.filler_bytes <= ALIGN_SLACK_BYTES, "{walk}");
}

#[test]
fn workers_of_a_group_bump_buffers_of_their_own_taken_from_its_tlab() {
    let h = heap(16 << 20);
    let a = Allocator::new(&h, AllocPolicy::SharedTlab { group: 2 }, 4);
    assert!(a.buffered());
    let tl: Vec<_> = (0..4)
        .map(|w| a.tlab_for(w, 0).unwrap() as *const _)
        .collect();
    assert!(
        tl.iter().enumerate().all(|(i, p)| !tl[..i].contains(p)),
        "one buffer per worker"
    );
    // 1024-byte TLABs: 128 words, buffers of a quarter (32 words). An
    // i32[6] is 4 words, so 8 of them fill a buffer.
    let mut seen = Vec::new();
    for n in 0..20 {
        for w in 0..4 {
            let at = a.alloc(w, ints(6)).unwrap();
            seen.push((at, w, n));
        }
    }
    // Each worker's objects sit one after another inside its buffer.
    for w in 0..4 {
        let mine: Vec<u32> = seen.iter().filter(|s| s.1 == w).map(|s| s.0).collect();
        let consecutive = mine.windows(2).filter(|p| p[1] == p[0] + 4).count();
        assert!(consecutive >= 15, "worker {w}: {mine:?}");
    }
    let st = a.stats();
    // 20 objects a worker, 8 a buffer: 3 buffers each, 6 a group; 4
    // buffers a TLAB: 2 refills a group.
    assert_eq!(st.buffer_refills, 12, "{st:?}");
    assert_eq!(st.refills, 4, "{st:?}");
    drop(a);
    let walk = h.verify(|_| None).unwrap();
    assert_eq!(walk.arrays, 80);
    assert_eq!(walk.bytes, h.used() - 16, "every tail is a filler");
}

#[test]
fn without_buffers_a_group_shares_one_tlab_per_object() {
    let h = heap(16 << 20);
    let a = Allocator::new(&h, AllocPolicy::SharedTlab { group: 2 }, 4).with_buffers(false);
    assert!(!a.buffered());
    assert!(std::ptr::eq(
        a.tlab_for(0, 0).unwrap(),
        a.tlab_for(1, 0).unwrap()
    ));
    let x = a.alloc(0, ints(6)).unwrap();
    let y = a.alloc(1, ints(6)).unwrap();
    assert_eq!(y, x + 4, "both workers bump the same TLAB");
    assert_eq!(a.stats().buffer_refills, 0);
    // Groups of one never have buffers: their TLABs are their own.
    let b = Allocator::new(&h, AllocPolicy::SharedTlab { group: 1 }, 2);
    assert!(!b.buffered() && !b.with_buffers(true).buffered());
    assert!(!Allocator::new(&h, AllocPolicy::EdenCas, 2).buffered());
}

#[test]
fn a_failed_group_refill_fails_the_buffer_once_and_the_next_one_succeeds() {
    let h = heap(16 << 20);
    // The group's first refill fails for its refiller (a transient
    // `Overflow`): the buffer publishes an empty TLAB, and the next
    // allocation refills it.
    let a = Allocator::new(&h, AllocPolicy::SharedTlab { group: 2 }, 2).with_refill_fault(1, 0);
    assert_eq!(a.alloc(0, ints(6)), Err(AllocFailure::Overflow));
    let x = a.alloc(0, ints(6)).unwrap();
    let y = a.alloc(1, ints(6)).unwrap();
    assert_ne!(x, y);
    drop(a);
    let walk = h.verify(|_| None).unwrap();
    assert_eq!(walk.arrays, 2);
    assert_eq!(walk.bytes, h.used() - 16);
}

#[test]
fn exhaustion_through_a_buffer_is_for_good_and_the_heap_parses() {
    let h = heap(64 << 10);
    let a = Allocator::new(&h, AllocPolicy::SharedTlab { group: 2 }, 2);
    let (mut ok, mut failed) = (0u64, [false; 2]);
    // A worker whose buffer's refill found the group's TLAB failed
    // fails from then on; the other one uses up its buffer first.
    for n in 0..20_000 {
        let w = n % 2;
        match a.alloc(w, ints(6)) {
            Ok(_) => {
                assert!(!failed[w], "worker {w} allocated after failing");
                ok += 1;
            }
            Err(e) => {
                assert_eq!(e, AllocFailure::Exhausted);
                failed[w] = true;
            }
        }
    }
    assert_eq!(failed, [true, true]);
    assert!(ok > 1000, "{ok}");
    assert_eq!(a.stats().exhausted, 20_000 - ok);
    drop(a);
    let walk = h.verify(|_| None).unwrap();
    assert_eq!(walk.arrays, ok);
    assert_eq!(walk.bytes, h.used() - 16);
}

#[test]
fn stress_exhaustion_is_counted_anew_after_a_collection() {
    // Every second refill (over the allocator's slots) finds eden
    // exhausted; a collection (its reset) counts anew, so the refill right
    // after one finds room whatever other slots refilled before it.
    let h = heap(64 << 20);
    let a = Allocator::new(&h, AllocPolicy::SharedTlab { group: 1 }, 2)
        .with_tlab_bytes(256)
        .with_exhaustion_every(2);
    // A quarter of a TLAB (the most a TLAB takes): four per refill.
    let obj = Header::Object { class: 7, size: 64 };
    // Slot 0: refill 1 finds room, refill 2 the made-up exhaustion.
    let made = (0..100).take_while(|_| a.alloc(0, obj).is_ok()).count();
    assert!((1..100).contains(&made), "{made} before the exhaustion");
    // Slot 1: refill 3.
    assert!(a.alloc(1, obj).is_ok(), "refill 3");
    a.reset_after_collection();
    // Refill 4, counted on, would find the made-up exhaustion right
    // after the collection.
    assert!(
        a.alloc(1, obj).is_ok(),
        "the first refill after a collection"
    );
    a.retire();
}
