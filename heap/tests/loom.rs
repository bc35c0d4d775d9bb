//! loom models of the designated-refiller protocol. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p offload-heap --test loom --release`
//! (scripts/test-all does).
#![cfg(loom)]

use loom::sync::Mutex;
use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::thread;
use offload_heap::{AllocFailure, Eden, SharedTlab};
use std::sync::Arc;

/// Eden of `limit` words handing out TLABs of `tlab` words; records every carve
/// and fill, and checks that two refills never overlap.
struct MockEden {
    top: AtomicU32,
    limit: u32,
    tlab: u32,
    refilling: AtomicBool,
    /// Carves still to fail transiently (`Overflow`), as a group's TLAB
    /// does for an allocation buffer's refill.
    transient: AtomicU32,
    carves: Mutex<Vec<(u32, u32)>>,
    fills: Mutex<Vec<(u32, u32)>>,
}

impl MockEden {
    fn new(limit: u32, tlab: u32) -> Self {
        MockEden {
            top: AtomicU32::new(0),
            limit,
            tlab,
            refilling: AtomicBool::new(false),
            transient: AtomicU32::new(0),
            carves: Mutex::new(Vec::new()),
            fills: Mutex::new(Vec::new()),
        }
    }
}

impl Eden for MockEden {
    fn carve(&self, min: u32) -> Result<(u32, u32), AllocFailure> {
        assert!(
            !self.refilling.swap(true, Ordering::SeqCst),
            "two refillers at once"
        );
        let start = self.top.load(Ordering::SeqCst);
        let end = (start + self.tlab.max(min)).min(self.limit);
        let transient = self.transient.load(Ordering::SeqCst);
        let out = if transient > 0 {
            self.transient.store(transient - 1, Ordering::SeqCst);
            Err(AllocFailure::Overflow)
        } else if end >= start + min {
            self.top.store(end, Ordering::SeqCst);
            self.carves.lock().unwrap().push((start, end));
            Ok((start, end))
        } else {
            Err(AllocFailure::Exhausted)
        };
        self.refilling.store(false, Ordering::SeqCst);
        out
    }

    fn fill(&self, start: u32, end: u32) {
        self.fills.lock().unwrap().push((start, end));
    }
}

fn check(results: &[Vec<(u32, Result<u32, AllocFailure>)>], eden: &MockEden) {
    let carves = eden.carves.lock().unwrap().clone();
    let fills = eden.fills.lock().unwrap().clone();
    let mut spans: Vec<(u32, u32)> = results
        .iter()
        .flatten()
        .filter_map(|&(w, r)| r.ok().map(|at| (at, at + w)))
        .collect();
    // Every object lies inside one carved TLAB.
    for &(s, e) in &spans {
        assert!(
            carves.iter().any(|&(cs, ce)| cs <= s && e <= ce),
            "object {s}..{e} outside every TLAB {carves:?}"
        );
    }
    // Objects and fillers never overlap.
    spans.extend(fills.iter().copied());
    spans.sort();
    for w in spans.windows(2) {
        assert!(w[0].1 <= w[1].0, "overlap: {:?} and {:?}", w[0], w[1]);
    }
}

/// Explore with at most `preemptions` forced thread switches (yields in spin
/// loops are free), which keeps three-thread models tractable.
fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.max_branches = 100_000;
    b.check(f);
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.max_branches = 100_000;
    b.check(f);
}

#[test]
fn two_allocators_refill_without_overlap() {
    model(|| {
        let eden = Arc::new(MockEden::new(100, 4));
        let slot = Arc::new(SharedTlab::new());
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (eden, slot) = (eden.clone(), slot.clone());
                thread::spawn(move || {
                    (0..2)
                        .map(|_| (3, slot.allocate(3, &*eden, true)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results.iter().flatten().all(|(_, r)| r.is_ok()));
        check(&results, &eden);
        // Four objects of 3 words in TLABs of 4: one refill each.
        assert_eq!(slot.refills(), 4);
        assert_eq!(eden.carves.lock().unwrap().len(), 4);
    });
}

#[test]
fn three_allocators_share_one_slot() {
    model_bounded(1, || {
        let eden = Arc::new(MockEden::new(100, 5));
        let slot = Arc::new(SharedTlab::new());
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let (eden, slot) = (eden.clone(), slot.clone());
                thread::spawn(move || vec![(2, slot.allocate(2, &*eden, true))])
            })
            .collect();
        let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results.iter().flatten().all(|(_, r)| r.is_ok()));
        check(&results, &eden);
        // 6 words in TLABs of 5: exactly two refills, whatever the interleaving.
        assert_eq!(slot.refills(), 2);
    });
}

#[test]
fn exhaustion_fails_every_waiter() {
    model_bounded(1, || {
        // Room for one TLAB of 4 words only.
        let eden = Arc::new(MockEden::new(4, 4));
        let slot = Arc::new(SharedTlab::new());
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let (eden, slot) = (eden.clone(), slot.clone());
                thread::spawn(move || vec![(3, slot.allocate(3, &*eden, true))])
            })
            .collect();
        let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let ok = results.iter().flatten().filter(|(_, r)| r.is_ok()).count();
        let failed = results
            .iter()
            .flatten()
            .filter(|(_, r)| *r == Err(AllocFailure::Exhausted))
            .count();
        assert_eq!(ok, 1, "one object fits: {results:?}");
        assert_eq!(failed, 2, "everyone else sees FAILED: {results:?}");
        assert!(slot.failed());
        check(&results, &eden);
    });
}

#[test]
fn a_transient_carve_failure_fails_its_refiller_and_the_waiters_go_on() {
    model_bounded(1, || {
        let eden = Arc::new(MockEden::new(100, 4));
        eden.transient.store(1, Ordering::SeqCst);
        let slot = Arc::new(SharedTlab::new());
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (eden, slot) = (eden.clone(), slot.clone());
                thread::spawn(move || {
                    let mut out = Vec::new();
                    let mut overflows = 0;
                    loop {
                        match slot.allocate(3, &*eden, true) {
                            Err(AllocFailure::Overflow) => overflows += 1,
                            r => {
                                out.push((3, r));
                                break (out, overflows);
                            }
                        }
                    }
                })
            })
            .collect();
        let (results, overflows): (Vec<_>, Vec<_>) =
            hs.into_iter().map(|h| h.join().unwrap()).unzip();
        // Exactly the first refiller saw the failure; nobody waits for
        // ever (the empty TLAB it published makes the next add a refill).
        assert_eq!(overflows.iter().sum::<u32>(), 1);
        assert!(results.iter().flatten().all(|(_, r)| r.is_ok()));
        check(&results, &eden);
        assert!(!slot.failed());
    });
}

#[test]
fn fail_on_overflow_never_waits() {
    model(|| {
        let eden = Arc::new(MockEden::new(100, 2));
        let slot = Arc::new(SharedTlab::new());
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (eden, slot) = (eden.clone(), slot.clone());
                thread::spawn(move || {
                    let mut out = Vec::new();
                    // Retry on Overflow, as the host does.
                    loop {
                        match slot.allocate(2, &*eden, false) {
                            Err(AllocFailure::Overflow) => thread::yield_now(),
                            r => {
                                out.push((2, r));
                                break out;
                            }
                        }
                    }
                })
            })
            .collect();
        let results: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(results.iter().flatten().all(|(_, r)| r.is_ok()));
        check(&results, &eden);
    });
}

#[test]
fn one_allocator_refills_in_order() {
    model(|| {
        let eden = MockEden::new(100, 4);
        let slot = SharedTlab::new();
        assert_eq!(slot.allocate(3, &eden, true), Ok(0));
        assert_eq!(slot.allocate(3, &eden, true), Ok(4));
    });
}

#[test]
fn two_allocators_one_object_each() {
    model(|| {
        let eden = Arc::new(MockEden::new(100, 4));
        let slot = Arc::new(SharedTlab::new());
        let (e2, s2) = (eden.clone(), slot.clone());
        let h = thread::spawn(move || s2.allocate(3, &*e2, true));
        let a = slot.allocate(3, &*eden, true);
        let b = h.join().unwrap();
        assert!(a.is_ok() && b.is_ok());
    });
}

#[test]
fn after_a_collection_a_failed_slot_refills_again_without_overlap() {
    model_bounded(1, || {
        // Eden fills: one allocator gets the only TLAB, the other sees
        // FAILED (the device deopts both waiters with AllocationFailure).
        let eden = Arc::new(MockEden::new(4, 4));
        let slot = Arc::new(SharedTlab::new());
        let first: Vec<_> = (0..2)
            .map(|_| {
                let (eden, slot) = (eden.clone(), slot.clone());
                thread::spawn(move || slot.allocate(3, &*eden, true))
            })
            .collect();
        let first: Vec<_> = first.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(first.contains(&Err(AllocFailure::Exhausted)), "{first:?}");
        // The safepoint: every allocator has stopped. The collection
        // retires the TLAB, frees everything (eden's top back to 0) and
        // resets the slot.
        slot.retire(&*eden);
        eden.top.store(0, Ordering::SeqCst);
        eden.carves.lock().unwrap().clear();
        eden.fills.lock().unwrap().clear();
        slot.reset();
        assert!(!slot.failed());
        // The retried allocations refill through the protocol again.
        let eden2 = Arc::new(MockEden::new(8, 4));
        let again: Vec<_> = (0..2)
            .map(|_| {
                let (eden2, slot) = (eden2.clone(), slot.clone());
                thread::spawn(move || vec![(3, slot.allocate(3, &*eden2, true))])
            })
            .collect();
        let results: Vec<_> = again.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(
            results.iter().flatten().all(|(_, r)| r.is_ok()),
            "both fit after the collection: {results:?}"
        );
        check(&results, &eden2);
    });
}
