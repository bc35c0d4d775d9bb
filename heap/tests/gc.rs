//! The collector against a model: random object graphs, random roots; what
//! the roots reach survives with its contents and its edges, the rest is
//! freed, and eden's top comes down to exactly the live data.

use offload_heap::{
    AllocPolicy, Allocator, ClassShape, Heap, HeapConfig, HeapError, layout::Header,
};
use offload_ir::{ClassId, Elem};
use std::collections::{BTreeMap, BTreeSet};

/// Class 0: `{ id: i32, next: ref }` (16 bytes); class 1: `{ id: i32, a:
/// ref, b: ref, pad: i32 }` (24 bytes); class 2: `{ id: i32, x: i64 }` (24
/// bytes), no references.
fn shapes() -> Vec<ClassShape> {
    vec![
        ClassShape {
            size: 16,
            ref_offsets: vec![12],
        },
        ClassShape {
            size: 24,
            ref_offsets: vec![12, 16],
        },
        ClassShape {
            size: 24,
            ref_offsets: vec![],
        },
    ]
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

/// What a node is: its reference slots (byte offsets) in the heap.
#[derive(Clone, Debug)]
enum Kind {
    Obj(u32),
    RefArray(u32),
    Ints(u32),
}

fn slots(k: &Kind) -> Vec<usize> {
    match *k {
        Kind::Obj(0) => vec![12],
        Kind::Obj(1) => vec![12, 16],
        Kind::Obj(_) => vec![],
        Kind::RefArray(n) => (0..n as usize).map(|i| 8 + 4 * i).collect(),
        Kind::Ints(_) => vec![],
    }
}

fn header(k: &Kind) -> Header {
    match *k {
        Kind::Obj(c) => Header::Object {
            class: c,
            size: shapes()[c as usize].size,
        },
        Kind::RefArray(n) => Header::Array {
            elem: Elem::Class(ClassId(0)),
            dims: 1,
            len: n,
        },
        Kind::Ints(n) => Header::Array {
            elem: Elem::I32,
            dims: 1,
            len: n,
        },
    }
}

/// Where each node's identity is kept: objects in their `id` field (byte
/// 8), arrays of ints in element 0; reference arrays by their length and
/// position (the model knows their order).
fn id_offset(k: &Kind) -> Option<usize> {
    match k {
        Kind::Obj(_) | Kind::Ints(_) => Some(8),
        Kind::RefArray(_) => None,
    }
}

/// A random graph of `n` nodes, with `edges` per node on average, built
/// through a TLAB allocator (with garbage fillers at TLAB ends), and
/// `roots` random roots. Returns the heap addresses, the node kinds, the
/// edges (node, slot) → node, and the roots (node indices, or None for a
/// null root).
#[allow(clippy::type_complexity)]
fn build(
    heap: &Heap,
    rng: &mut Rng,
    n: usize,
    roots: usize,
) -> (
    Vec<u32>,
    Vec<Kind>,
    BTreeMap<(usize, usize), usize>,
    Vec<Option<usize>>,
) {
    let a = Allocator::new(heap, AllocPolicy::SharedTlab { group: 1 }, 3);
    let mut at = Vec::new();
    let mut kinds = Vec::new();
    for i in 0..n {
        let k = match rng.below(10) {
            0..=3 => Kind::Obj(0),
            4..=6 => Kind::Obj(1),
            7 => Kind::Obj(2),
            8 => Kind::RefArray(rng.below(6) as u32),
            _ => Kind::Ints(1 + rng.below(40) as u32),
        };
        // A large array now and then goes straight to eden.
        let k = if rng.below(200) == 0 {
            Kind::Ints(2000)
        } else {
            k
        };
        let r = a.alloc(i % 3, header(&k)).unwrap();
        if let Some(o) = id_offset(&k) {
            heap.store32(r as usize * 8 + o, i as u32 + 1).unwrap();
        }
        if let Kind::Ints(len) = k {
            for e in 1..len as usize {
                heap.store32(r as usize * 8 + 8 + 4 * e, (i * 31 + e) as u32)
                    .unwrap();
            }
        }
        at.push(r);
        kinds.push(k);
    }
    let mut edges = BTreeMap::new();
    for i in 0..n {
        for s in slots(&kinds[i]) {
            if rng.below(4) != 0 {
                // Lists of class 0 point only at class 0 in real code;
                // the collector does not care, and neither does the model.
                let j = rng.below(n as u64) as usize;
                heap.store32(at[i] as usize * 8 + s, at[j]).unwrap();
                edges.insert((i, s), j);
            }
        }
    }
    let roots = (0..roots)
        .map(|_| (rng.below(8) != 0).then(|| rng.below(n as u64) as usize))
        .collect();
    drop(a);
    (at, kinds, edges, roots)
}

fn reachable(
    n: usize,
    kinds: &[Kind],
    edges: &BTreeMap<(usize, usize), usize>,
    roots: &[Option<usize>],
) -> BTreeSet<usize> {
    let mut seen = BTreeSet::new();
    let mut stack: Vec<usize> = roots.iter().flatten().copied().collect();
    while let Some(i) = stack.pop() {
        if seen.insert(i) {
            for s in slots(&kinds[i]) {
                if let Some(&j) = edges.get(&(i, s)) {
                    stack.push(j);
                }
            }
        }
    }
    assert!(seen.iter().all(|&i| i < n));
    seen
}

fn size_of(k: &Kind) -> u64 {
    header(k).size().unwrap().div_ceil(8) * 8
}

fn run(seed: u64, n: usize, nroots: usize, threads: usize) {
    let heap = heap(256 << 20);
    let mut rng = Rng(seed | 1);
    // Host garbage before the graph, so nothing is in place.
    for _ in 0..50 {
        Allocator::alloc_host(&heap, header(&Kind::Ints(7))).unwrap();
    }
    let (at, kinds, edges, roots) = build(&heap, &mut rng, n, nroots);
    let live = reachable(n, &kinds, &edges, &roots);
    let mut cells: Vec<u32> = roots.iter().map(|r| r.map_or(0, |i| at[i])).collect();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    let st = pool
        .install(|| {
            // SAFETY: this test has the heap to itself; the allocator is
            // dropped (its TLABs retired).
            unsafe {
                heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
                    cells.iter_mut().for_each(&mut *f)
                })
            }
        })
        .unwrap();
    let live_bytes: u64 = live.iter().map(|&i| size_of(&kinds[i])).sum();
    assert_eq!(
        st.after,
        16 + live_bytes,
        "seed {seed}: top is the live data"
    );
    assert_eq!(heap.used(), st.after);
    assert_eq!(st.live_objects, live.len() as u64);
    assert_eq!(st.padding, 0, "launches' objects share mixed pages");
    assert_eq!(st.roots, roots.iter().flatten().count() as u64);
    let walk = heap.verify(|c| shapes().get(c as usize).cloned()).unwrap();
    assert_eq!(walk.objects + walk.arrays, live.len() as u64);
    assert_eq!(walk.fillers, 0, "compaction leaves no fillers");
    // Survivors keep their order: node i's new address, by rank of its
    // old one.
    let mut new_at = BTreeMap::new();
    let mut next = 2u32;
    let mut by_address: Vec<usize> = live.iter().copied().collect();
    by_address.sort_by_key(|&i| at[i]);
    for &i in &by_address {
        new_at.insert(i, next);
        next += (size_of(&kinds[i]) / 8) as u32;
    }
    for (k, r) in roots.iter().enumerate() {
        assert_eq!(
            cells[k],
            r.map_or(0, |i| new_at[&i]),
            "seed {seed}: root {k}"
        );
    }
    for &i in &live {
        let r = new_at[&i] as usize * 8;
        assert_eq!(
            heap.header(offload_heap::Ref(new_at[&i])).unwrap(),
            header(&kinds[i])
        );
        if let Some(o) = id_offset(&kinds[i]) {
            assert_eq!(
                heap.load32(r + o).unwrap(),
                i as u32 + 1,
                "seed {seed}: node {i}"
            );
        }
        if let Kind::Ints(len) = kinds[i] {
            for e in 1..len as usize {
                assert_eq!(heap.load32(r + 8 + 4 * e).unwrap(), (i * 31 + e) as u32);
            }
        }
        for s in slots(&kinds[i]) {
            let want = edges.get(&(i, s)).map_or(0, |j| new_at[j]);
            assert_eq!(heap.load32(r + s).unwrap(), want, "seed {seed}: {i}.{s}");
        }
    }
    // Allocation goes on from the new top, on zeroed memory.
    let b = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 1 }, 1);
    for _ in 0..2000 {
        let x = b.alloc(0, header(&Kind::Ints(10))).unwrap();
        assert!(x >= next);
        for e in 0..10 {
            assert_eq!(heap.load32(x as usize * 8 + 8 + 4 * e).unwrap(), 0);
        }
    }
}

#[test]
fn random_graphs_keep_exactly_what_their_roots_reach() {
    for seed in 1..=40u64 {
        let n = 50 + (seed as usize * 97) % 3000;
        run(
            seed * 0x9E37_79B9,
            n,
            1 + seed as usize % 12,
            1 + seed as usize % 4,
        );
    }
}

#[test]
fn a_wide_graph_marks_in_parallel() {
    run(7, 200_000, 64, 4);
}

#[test]
fn live_data_already_in_place_does_not_move() {
    let heap = heap(16 << 20);
    let mut roots: Vec<u32> = (0..100)
        .map(|_| Allocator::alloc_host(&heap, header(&Kind::Ints(5))).unwrap())
        .collect();
    let garbage = Allocator::alloc_host(&heap, header(&Kind::Ints(500))).unwrap();
    let before = roots.clone();
    // SAFETY: the test has the heap to itself.
    let st = unsafe {
        heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
            roots.iter_mut().for_each(&mut *f)
        })
    }
    .unwrap();
    assert_eq!(st.moved, 0);
    assert_eq!(roots, before);
    // What is left is the live arrays (the rest of the host's run of array
    // pages was a filler, freed with the garbage).
    assert_eq!(st.after, 16 + 100 * size_of(&Kind::Ints(5)));
    assert!(heap.used() <= u64::from(garbage) * 8);
}

#[test]
fn large_arrays_keep_their_colour_gap_and_cache_line_through_compaction() {
    use offload_heap::alloc::{COLOUR_GAP_BYTES, COLOUR_MIN_BYTES};
    use offload_heap::layout::Ref;
    let gap = (COLOUR_GAP_BYTES / 8) as u32;
    let big = Kind::Ints((COLOUR_MIN_BYTES / 4) as u32);
    // Elements (the word after the header) on a 64-byte line.
    let lined = |r: u32| (r + 1).is_multiple_of(8);
    // Garbage of every size modulo a line below the second array, and a
    // small live array between, so that it slides by every amount.
    for garbage_len in [1u32, 2, 3, 4, 5, 7, 9, 13, 5000] {
        let heap = heap(64 << 20);
        let x = Allocator::alloc_host(&heap, header(&big)).unwrap();
        // Garbage straight from eden, right after x; the small arrays go
        // to the host's run of array pages (a page) after it.
        let g = header(&Kind::Ints(garbage_len));
        let at = heap
            .alloc_direct_on(g.size().unwrap(), offload_abi::pages::ARRAYS)
            .unwrap();
        heap.write_header(at, g).unwrap();
        let between = Allocator::alloc_host(&heap, header(&Kind::Ints(3))).unwrap();
        let y = Allocator::alloc_host(&heap, header(&big)).unwrap();
        let small = Allocator::alloc_host(&heap, header(&Kind::Ints(5))).unwrap();
        assert!(lined(x) && lined(y), "x at {x}, y at {y}");
        let gap_header = Header::Filler {
            size: COLOUR_GAP_BYTES as u32,
        };
        assert_eq!(heap.header(Ref(y - gap)).unwrap(), gap_header);
        // Each large array starts in a coherence chunk no object before it
        // reaches (launches over such arrays share a GPU).
        let chunk = |word: u32| word as usize * 8 / offload_heap::resident::CHUNK_BYTES;
        assert!(chunk(y) > chunk(small.max(between) + 4), "y at {y}");
        let last = y as usize * 8 + 8 + (COLOUR_MIN_BYTES as usize - 4);
        heap.store32(y as usize * 8 + 8, 77).unwrap();
        heap.store32(last, 78).unwrap();
        heap.store32(between as usize * 8 + 8, 79).unwrap();
        let mut roots = [x, between, y, small];
        // SAFETY: the test has the heap to itself.
        let st = unsafe {
            heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
                roots.iter_mut().for_each(&mut *f)
            })
        }
        .unwrap();
        let [x2, between2, y2, small2] = roots;
        assert_eq!(x2, x);
        assert!(lined(y2), "garbage {garbage_len}: y {y} -> {y2} ({st:?})");
        assert!(y2 <= y && between2 <= between && small2 <= small);
        // The gap came along, at most 7 words of padding before it.
        assert_eq!(heap.header(Ref(y2 - gap)).unwrap(), gap_header);
        assert_eq!(small2, between2 + 3, "the run's arrays stay together");
        assert!(y2 - gap - (small2 + 4) < 8, "padding before the gap");
        assert!(chunk(y2) > chunk(small2 + 4), "y2 at {y2}");
        assert!(y2 < y, "garbage {garbage_len}: y slid");
        assert_eq!(heap.load32(y2 as usize * 8 + 8).unwrap(), 77);
        let last2 = y2 as usize * 8 + 8 + (COLOUR_MIN_BYTES as usize - 4);
        assert_eq!(heap.load32(last2).unwrap(), 78);
        assert_eq!(heap.load32(between2 as usize * 8 + 8).unwrap(), 79);
        let walk = heap.walk(|_, _| ()).unwrap();
        assert_eq!(walk.arrays, 4);
        // A second collection finds everything in place.
        // SAFETY: as above.
        let st = unsafe {
            heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
                roots.iter_mut().for_each(&mut *f)
            })
        }
        .unwrap();
        assert_eq!(st.moved, 0, "garbage {garbage_len}");
        assert_eq!(roots, [x2, between2, y2, small2]);
    }
}

#[test]
fn a_corrupt_root_or_object_is_an_error_and_nothing_moves() {
    let heap = heap(16 << 20);
    let _junk = Allocator::alloc_host(&heap, header(&Kind::Ints(50))).unwrap();
    let o = Allocator::alloc_host(&heap, header(&Kind::Obj(0))).unwrap();
    let used = heap.used();
    // A root past the top.
    let mut roots = [o, 1 << 30];
    // SAFETY: the test has the heap to itself.
    let e = unsafe {
        heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
            roots.iter_mut().for_each(&mut *f)
        })
    };
    assert!(matches!(e, Err(HeapError::Corrupt { .. })), "{e:?}");
    // A field pointing into the middle of an array (no header there).
    heap.store32(o as usize * 8 + 12, 3).unwrap();
    let mut roots = [o];
    // SAFETY: as above.
    let e = unsafe {
        heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
            roots.iter_mut().for_each(&mut *f)
        })
    };
    assert!(matches!(e, Err(HeapError::Corrupt { .. })), "{e:?}");
    // An object of a class the collector is not told about.
    heap.store32(o as usize * 8 + 12, 0).unwrap();
    let mut roots = [o];
    // SAFETY: as above.
    let e = unsafe {
        heap.collect(&[], &mut |f: &mut dyn FnMut(&mut u32)| {
            roots.iter_mut().for_each(&mut *f)
        })
    };
    assert!(matches!(e, Err(HeapError::Corrupt { .. })), "{e:?}");
    assert_eq!(heap.used(), used, "nothing was freed");
    assert_eq!(roots, [o], "nothing moved");
}

#[test]
fn a_slot_that_saw_eden_exhausted_allocates_again_after_a_reset() {
    let heap = heap(64 << 10);
    let a = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 1 }, 1);
    let mut kept = None;
    while let Ok(x) = a.alloc(0, header(&Kind::Ints(10))) {
        kept.get_or_insert(x);
    }
    let slot = a.tlab_for(0, 0).unwrap();
    assert!(slot.failed());
    slot.retire(&heap);
    let mut roots = [kept.unwrap()];
    // SAFETY: every TLAB is retired and nothing else touches the heap.
    unsafe {
        heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
            roots.iter_mut().for_each(&mut *f)
        })
    }
    .unwrap();
    slot.reset();
    assert!(!slot.failed());
    assert!(a.alloc(0, header(&Kind::Ints(10))).is_ok());
}

/// Several MiB of live arrays among garbage laid out four ways — every
/// other array dead (the slide's waves double), one in fifty dead (each
/// chunk waits for the one before), the first half dead (everything
/// slides down whole, one wave), a random third dead — slide on four
/// workers to exactly their places, in order, every word intact, and the
/// reference arrays among them (some long enough to run across chunks, one
/// long enough to be updated on every worker) point at their targets' new
/// places.
#[test]
fn live_data_slides_in_parallel_chunks_with_every_word_intact() {
    type Keep = fn(usize, &mut Rng) -> bool;
    let patterns: [(&str, Keep); 4] = [
        ("every other", |i, _| i % 2 == 0),
        ("one in fifty dead", |i, _| i % 50 != 7),
        ("first half dead", |i, _| i >= 60_000),
        ("a random third dead", |_, rng| rng.below(3) != 0),
    ];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    for (name, keep) in patterns {
        let heap = heap(64 << 20);
        let mut rng = Rng(0x5eed);
        // (index, kind, old address); a reference array's elements are the
        // indices in `kept` of arrays kept before it.
        let mut kept: Vec<(usize, Kind, u32)> = Vec::new();
        let mut targets: Vec<Vec<usize>> = Vec::new();
        for i in 0..120_000usize {
            let kind = match i % 5 {
                // One longer than a worker updates alone.
                3 if i == 72_343 => Kind::RefArray(40_000),
                3 => Kind::RefArray(1 + (i % 9) as u32 + if i % 1001 == 3 { 300 } else { 0 }),
                _ => Kind::Ints(1 + (i * 7919 % 40) as u32 + if i % 997 == 0 { 600 } else { 0 }),
            };
            let r = Allocator::alloc_host(&heap, header(&kind)).unwrap();
            let mut to = Vec::new();
            match kind {
                Kind::Ints(len) => {
                    for e in 0..len as usize {
                        heap.store32(r as usize * 8 + 8 + 4 * e, (i * 31 + e) as u32)
                            .unwrap();
                    }
                }
                Kind::RefArray(len) => {
                    for e in 0..len as usize {
                        if kept.is_empty() {
                            break;
                        }
                        let k = rng.below(kept.len() as u64) as usize;
                        heap.store32(r as usize * 8 + 8 + 4 * e, kept[k].2).unwrap();
                        to.push(k);
                    }
                }
                Kind::Obj(_) => unreachable!(),
            }
            if keep(i, &mut rng) {
                kept.push((i, kind, r));
                targets.push(to);
            }
        }
        let mut roots: Vec<u32> = kept.iter().map(|&(_, _, r)| r).collect();
        let st = pool
            .install(|| {
                // SAFETY: the test has the heap to itself.
                unsafe {
                    heap.collect(&shapes(), &mut |f: &mut dyn FnMut(&mut u32)| {
                        roots.iter_mut().for_each(&mut *f)
                    })
                }
            })
            .unwrap();
        let live: u64 = kept.iter().map(|(_, k, _)| size_of(k)).sum();
        assert!(live > 4 << 20, "{name}: several chunks of live data");
        assert_eq!(st.after, 16 + live + st.padding, "{name}");
        assert_eq!(st.live_objects, kept.len() as u64, "{name}");
        let mut next = 2u32;
        // In the order of their old addresses (arrays of references and of
        // ints lie on pages of their own).
        let mut order: Vec<usize> = (0..kept.len()).collect();
        order.sort_by_key(|&k| kept[k].2);
        for k in order {
            let ((i, kind, _), r) = (&kept[k], roots[k]);
            let h = heap.header(offload_heap::Ref(r)).unwrap();
            // Survivors keep their order, side by side (a class's page run
            // may start a page: padding).
            assert!(r >= next, "{name}: array {i} at {r} below {next}");
            assert_eq!(h, header(kind), "{name}: array {i}");
            for (e, want) in match kind {
                Kind::Ints(len) => (0..*len as usize).map(|e| (i * 31 + e) as u32).collect(),
                _ => targets[k].iter().map(|&t| roots[t]).collect::<Vec<_>>(),
            }
            .into_iter()
            .enumerate()
            {
                assert_eq!(
                    heap.load32(r as usize * 8 + 8 + 4 * e).unwrap(),
                    want,
                    "{name}: array {i} element {e}"
                );
            }
            next = r + (size_of(kind) / 8) as u32;
        }
        assert_eq!(
            u64::from(next) * 8,
            st.after,
            "{name}: top is the live data"
        );
        let walk = heap.verify(|c| shapes().get(c as usize).cloned()).unwrap();
        assert_eq!(walk.arrays, kept.len() as u64, "{name}");
    }
}
