//! Objects placed by class (`offload_heap::pages`): the host puts each
//! class's objects on pages of their own, launches' TLABs are mixed pages,
//! and after any collection every object still starts on a page whose tag
//! is its class (or arrays, or mixed) — with contents and edges intact and
//! the space the placement costs bounded.

use offload_abi::pages::{ARRAYS, MIXED, PAGE_WORDS};
use offload_heap::{
    AllocPolicy, Allocator, ClassShape, Heap, HeapConfig, Ref, layout::Header, pages::tag_for,
};
use offload_ir::Elem;
use std::collections::{BTreeMap, BTreeSet};

/// Six classes; class `c` is `{ id: i32, refs: ref × (c % 3) }` padded to
/// `16 + 8 * (c % 4)` bytes.
fn shapes() -> Vec<ClassShape> {
    (0..6u32)
        .map(|c| ClassShape {
            size: 16 + 8 * (c % 4),
            ref_offsets: (0..c % 3).map(|k| 12 + 4 * k).collect(),
        })
        .collect()
}

fn heap(max: usize) -> Heap {
    Heap::new(HeapConfig {
        initial: max.min(1 << 20),
        max,
        tlab_bytes: 4096,
        grow_step: max.min(1 << 20),
    })
    .unwrap()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A node: a class instance (id at byte 8, references from byte 12) or an
/// `i32` array (id in element 0).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Obj(u32),
    Ints(u32),
}

fn header(k: Kind) -> Header {
    match k {
        Kind::Obj(c) => Header::Object {
            class: c,
            size: shapes()[c as usize].size,
        },
        Kind::Ints(n) => Header::Array {
            elem: Elem::I32,
            dims: 1,
            len: n,
        },
    }
}

fn slots(k: Kind) -> Vec<usize> {
    match k {
        Kind::Obj(c) => shapes()[c as usize]
            .ref_offsets
            .iter()
            .map(|&o| o as usize)
            .collect(),
        Kind::Ints(_) => vec![],
    }
}

/// Every object starts on a page whose tag is its class, arrays on array
/// pages, both or either on mixed pages; host-placed nodes never on mixed
/// ones.
fn check_placement(heap: &Heap, host: &BTreeSet<u32>) {
    heap.check_pages().unwrap();
    heap.walk(|r, h| {
        let tag = heap.pages().tag_of(r.0);
        if host.contains(&r.0) {
            assert_eq!(Some(tag), tag_for(h), "{h} at word {} on tag {tag:#x}", r.0);
        }
    })
    .unwrap();
}

/// Build `n` nodes, a share `host_pct` of them by the host (by class) and
/// the rest through a launch's TLABs (mixed pages), link them at random,
/// collect with random roots, and check the survivors by id.
fn run(seed: u64, n: usize, host_pct: u64) {
    let heap = heap(64 << 20);
    let mut rng = Rng(seed | 1);
    let a = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 1 }, 2);
    let mut at = Vec::new();
    let mut kinds = Vec::new();
    let mut by_host = Vec::new();
    for i in 0..n {
        let k = match rng.below(8) {
            0..=5 => Kind::Obj(rng.below(6) as u32),
            6 => Kind::Ints(1 + rng.below(30) as u32),
            _ => Kind::Ints(if rng.below(50) == 0 { 3000 } else { 2 }),
        };
        let host = rng.below(100) < host_pct;
        let r = if host {
            Allocator::alloc_host(&heap, header(k)).unwrap()
        } else {
            a.alloc(i % 2, header(k)).unwrap()
        };
        heap.store32(r as usize * 8 + 8, i as u32 + 1).unwrap();
        at.push(r);
        kinds.push(k);
        by_host.push(host);
    }
    drop(a);
    let host_at: BTreeSet<u32> = (0..n).filter(|&i| by_host[i]).map(|i| at[i]).collect();
    check_placement(&heap, &host_at);
    let mut edges = BTreeMap::new();
    for i in 0..n {
        for s in slots(kinds[i]) {
            if rng.below(3) != 0 {
                let j = rng.below(n as u64) as usize;
                heap.store32(at[i] as usize * 8 + s, at[j]).unwrap();
                edges.insert((i, s), j);
            }
        }
    }
    let roots: Vec<usize> = (0..1 + n / 20)
        .map(|_| rng.below(n as u64) as usize)
        .collect();
    let mut live = BTreeSet::new();
    let mut stack = roots.clone();
    while let Some(i) = stack.pop() {
        if live.insert(i) {
            stack.extend(slots(kinds[i]).iter().filter_map(|s| edges.get(&(i, *s))));
        }
    }
    let mut cells: Vec<u32> = roots.iter().map(|&i| at[i]).collect();
    // SAFETY: this test has the heap to itself; the allocator is dropped.
    let st = unsafe {
        heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
            cells.iter_mut().for_each(&mut *f)
        })
    }
    .unwrap();
    assert_eq!(st.live_objects, live.len() as u64, "seed {seed}");
    heap.verify(|c| shapes().get(c as usize).cloned()).unwrap();
    // Find every survivor by its id; host-placed ones must still be on
    // pages of their own tag.
    let mut new_at = BTreeMap::new();
    heap.walk(|r, h| {
        if !matches!(h, Header::Filler { .. }) {
            let id = heap.load32(r.byte_offset() + 8).unwrap() as usize;
            new_at.insert(id - 1, r.0);
        }
    })
    .unwrap();
    assert_eq!(new_at.len(), live.len(), "seed {seed}");
    let moved_host: BTreeSet<u32> = live
        .iter()
        .filter(|&&i| by_host[i])
        .map(|i| new_at[i])
        .collect();
    check_placement(&heap, &moved_host);
    for (k, &i) in roots.iter().enumerate() {
        assert_eq!(cells[k], new_at[&i], "seed {seed}: root {k}");
    }
    for &i in &live {
        assert_eq!(heap.header(Ref(new_at[&i])).unwrap(), header(kinds[i]));
        for s in slots(kinds[i]) {
            let want = edges.get(&(i, s)).map_or(0, |j| new_at[j]);
            let got = heap.load32(new_at[&i] as usize * 8 + s).unwrap();
            assert_eq!(got, want, "seed {seed}: {i}.{s}");
        }
    }
    // What the placement costs: at most a page per change of tag between
    // neighbours, which the page stats count as filler.
    let live_bytes: u64 = live
        .iter()
        .map(|&i| header(kinds[i]).size().unwrap().div_ceil(8) * 8)
        .sum();
    let ps = heap.page_stats().unwrap();
    assert_eq!(ps.object_bytes(), live_bytes);
    assert_eq!(st.after, 16 + live_bytes + ps.filler_bytes(), "seed {seed}");
    assert_eq!(st.padding, ps.filler_bytes(), "seed {seed}");
    check_stats_add_up(&heap);
    let pages: u64 = ps.kinds.iter().map(|k| k.pages).sum();
    assert!(
        ps.filler_bytes() <= pages * u64::from(PAGE_WORDS) * 8,
        "seed {seed}: {ps:?}"
    );
}

#[test]
fn host_objects_stay_on_pages_of_their_class_through_collections() {
    for seed in 1..=24u64 {
        run(
            seed * 0x9E37_79B9,
            200 + (seed as usize * 331) % 4000,
            25 * (seed % 5),
        );
    }
}

#[test]
fn the_host_places_interleaved_classes_on_pages_of_their_own() {
    let heap = heap(16 << 20);
    let mut placed = BTreeSet::new();
    for i in 0..30_000u32 {
        let k = if i % 7 == 6 {
            Kind::Ints(i % 50)
        } else {
            Kind::Obj(i % 6)
        };
        placed.insert(Allocator::alloc_host(&heap, header(k)).unwrap());
    }
    check_placement(&heap, &placed);
    let ps = heap.page_stats().unwrap();
    let tags: Vec<u32> = ps.kinds.iter().map(|k| k.tag).collect();
    assert_eq!(tags, vec![0, 1, 2, 3, 4, 5, ARRAYS]);
    // Seven open runs (a partly filled page each) and the first page's
    // gap: the rest of the pages are full.
    let used = heap.used();
    assert!(
        ps.filler_bytes() * 10 <= used,
        "{} filler bytes of {used}",
        ps.filler_bytes()
    );
    assert!(!tags.contains(&MIXED));
}

#[test]
fn carves_racing_for_a_page_agree_on_its_tag() {
    let heap = heap(64 << 20);
    let a = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 1 }, 4);
    let placed = std::sync::Mutex::new(BTreeSet::new());
    std::thread::scope(|s| {
        for t in 0..4usize {
            let (heap, a, placed) = (&heap, &a, &placed);
            s.spawn(move || {
                for i in 0..4000u32 {
                    let k = Kind::Obj((i as usize * 7 + t) as u32 % 6);
                    if (i + t as u32).is_multiple_of(3) {
                        let r = Allocator::alloc_host(heap, header(k)).unwrap();
                        placed.lock().unwrap().insert(r);
                    } else {
                        a.alloc(t, header(k)).unwrap();
                    }
                }
            });
        }
    });
    drop(a);
    check_placement(&heap, &placed.into_inner().unwrap());
}

/// The page stats add up: every page in use is counted once, to one tag,
/// and objects and fillers make up the bytes in use.
fn check_stats_add_up(heap: &Heap) {
    let ps = heap.page_stats().unwrap();
    let used = heap.used();
    let page = u64::from(PAGE_WORDS) * 8;
    let pages: u64 = ps.kinds.iter().map(|k| k.pages).sum();
    assert_eq!(pages, used.div_ceil(page), "{ps:?}, {used} bytes in use");
    assert_eq!(16 + ps.object_bytes() + ps.filler_bytes(), used, "{ps:?}");
}

#[test]
fn page_stats_count_each_page_once_and_add_up_to_the_bytes_in_use() {
    let heap = heap(64 << 20);
    // A dead object of class 2, then class 3 and an array that live.
    let _dead = Allocator::alloc_host(&heap, header(Kind::Obj(2))).unwrap();
    let b = Allocator::alloc_host(&heap, header(Kind::Obj(3))).unwrap();
    let c = Allocator::alloc_host(&heap, header(Kind::Ints(2))).unwrap();
    check_stats_add_up(&heap);
    let ps = heap.page_stats().unwrap();
    // Each run is one page: the first one ends on the page boundary
    // although the heap starts two words in.
    assert_eq!(
        ps.kinds
            .iter()
            .map(|k| (k.tag, k.pages, k.objects))
            .collect::<Vec<_>>(),
        vec![(2, 1, 1), (3, 1, 1), (ARRAYS, 1, 1)]
    );
    assert_eq!(heap.used(), 3 * u64::from(PAGE_WORDS) * 8);
    let mut cells = [b, c];
    // SAFETY: this test has the heap to itself.
    unsafe {
        heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
            cells.iter_mut().for_each(&mut *f)
        })
    }
    .unwrap();
    check_stats_add_up(&heap);
    let ps = heap.page_stats().unwrap();
    // Class 3 slides to the start, the array to the next page (a change
    // of tag); the padding is class 3's page's unused space.
    assert_eq!(
        ps.kinds
            .iter()
            .map(|k| (k.tag, k.pages, k.objects, k.object_bytes, k.filler_bytes))
            .collect::<Vec<_>>(),
        vec![
            (3, 1, 1, 40, u64::from(PAGE_WORDS) * 8 - 16 - 40),
            (ARRAYS, 1, 1, 16, 0)
        ]
    );
}
