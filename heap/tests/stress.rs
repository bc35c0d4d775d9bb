//! Stress: every core allocates random sizes from a small eden across many
//! refills and heap growths; each allocation is filled with its owner's
//! pattern and checked; afterwards the heap walks and verifies cleanly.

use offload_heap::{AllocFailure, AllocPolicy, Allocator, Heap, HeapConfig, layout::Header};
use offload_ir::Elem;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn stress(policy: AllocPolicy) {
    stress_with(policy, true);
}

fn stress_with(policy: AllocPolicy, buffers: bool) {
    let heap = Heap::new(HeapConfig {
        initial: 64 << 10,
        max: 256 << 20,
        tlab_bytes: 1024,
        grow_step: 64 << 10,
    })
    .unwrap();
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(4);
    let alloc = Allocator::new(&heap, policy, threads).with_buffers(buffers);
    std::thread::scope(|s| {
        for t in 0..threads {
            let alloc = &alloc;
            let heap = &heap;
            s.spawn(move || {
                let mut seed =
                    0x1234_5678_9abc_def0 ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let mut mine = Vec::new();
                for n in 0..4000u64 {
                    // Mostly small arrays, sometimes one bigger than a quarter TLAB.
                    let len = if n % 97 == 0 {
                        300
                    } else {
                        (xorshift(&mut seed) % 24) as u32
                    };
                    let at = loop {
                        match alloc.alloc(
                            t,
                            Header::Array {
                                elem: Elem::I64,
                                dims: 1,
                                len,
                            },
                        ) {
                            Ok(at) => break at,
                            Err(AllocFailure::Overflow) => std::thread::yield_now(),
                            Err(AllocFailure::Exhausted) => panic!("256 MiB is plenty"),
                        }
                    };
                    let pattern = (t as u64) << 48 | n << 16;
                    for i in 0..len as usize {
                        let off = at as usize * 8 + 8 + i * 8;
                        assert_eq!(heap.load64(off).unwrap(), 0, "fresh memory is zero");
                        heap.store64(off, pattern | i as u64).unwrap();
                    }
                    mine.push((at, len, pattern));
                }
                for (at, len, pattern) in mine {
                    assert_eq!(
                        heap.header(offload_heap::Ref(at)).unwrap(),
                        Header::Array {
                            elem: Elem::I64,
                            dims: 1,
                            len
                        }
                    );
                    for i in 0..len as usize {
                        assert_eq!(
                            heap.load64(at as usize * 8 + 8 + i * 8).unwrap(),
                            pattern | i as u64,
                            "someone else wrote into my object"
                        );
                    }
                }
            });
        }
    });
    let stats = alloc.retire();
    let walk = heap.verify(|_| None).unwrap();
    assert_eq!(walk.arrays, threads as u64 * 4000);
    assert!(heap.grow_count() > 0, "the heap grew");
    if policy != AllocPolicy::EdenCas {
        assert!(stats.refills > 100, "many refills: {stats:?}");
    }
    let grouped = matches!(
        policy,
        AllocPolicy::SharedTlab { .. } | AllocPolicy::FailOnOverflow { .. }
    );
    if grouped && buffers {
        assert!(stats.buffer_refills > stats.refills, "{stats:?}");
    } else {
        assert_eq!(stats.buffer_refills, 0, "{stats:?}");
    }
    assert_eq!(walk.bytes, heap.used() - 16);
}

#[test]
fn shared_tlabs_under_stress() {
    stress(AllocPolicy::SharedTlab { group: 4 });
}

#[test]
fn shared_tlabs_without_buffers_under_stress() {
    stress_with(AllocPolicy::SharedTlab { group: 4 }, false);
}

#[test]
fn fail_on_overflow_under_stress() {
    stress(AllocPolicy::FailOnOverflow { group: 4 });
}

#[test]
fn fail_on_overflow_without_buffers_under_stress() {
    stress_with(AllocPolicy::FailOnOverflow { group: 4 }, false);
}

#[test]
fn private_tlabs_under_stress() {
    stress(AllocPolicy::PrivateTlab);
}

#[test]
fn eden_cas_under_stress() {
    stress(AllocPolicy::EdenCas);
}

#[test]
fn exhaustion_is_reported_and_the_heap_still_parses() {
    let heap = Heap::new(HeapConfig {
        initial: 64 << 10,
        max: 256 << 10,
        tlab_bytes: 1024,
        grow_step: 64 << 10,
    })
    .unwrap();
    let alloc = Allocator::new(&heap, AllocPolicy::SharedTlab { group: 2 }, 4);
    let mut ok = 0;
    let mut failed = 0;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let alloc = &alloc;
                s.spawn(move || {
                    let (mut ok, mut failed) = (0, 0);
                    for _ in 0..5000 {
                        match alloc.alloc(
                            t,
                            Header::Array {
                                elem: Elem::I32,
                                dims: 1,
                                len: 10,
                            },
                        ) {
                            Ok(_) => ok += 1,
                            Err(AllocFailure::Exhausted) => failed += 1,
                            Err(AllocFailure::Overflow) => unreachable!("shared TLABs wait"),
                        }
                    }
                    (ok, failed)
                })
            })
            .collect();
        for h in hs {
            let (o, f) = h.join().unwrap();
            ok += o;
            failed += f;
        }
    });
    assert!(failed > 0 && ok > 0);
    assert_eq!(alloc.stats().exhausted, failed as u64);
    drop(alloc);
    let walk = heap.verify(|_| None).unwrap();
    assert_eq!(walk.arrays, ok as u64);
    assert!(heap.committed() <= 256 << 10);
}
