//! The safepoint rendezvous (`offload_host_interp::control`): running
//! workers park at a requested safepoint and go on after its operation,
//! even when the operation panics; registered control words get stop or
//! wait bits by what the safepoint does to objects.

use offload_host_interp::Control;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

/// A worker that polls until told to leave; returns how many times it
/// parked.
fn worker(c: &Control, entered: &AtomicBool, leave: &AtomicBool) -> u64 {
    let _running = c.enter();
    entered.store(true, Ordering::Release);
    let mut parked = 0;
    while !leave.load(Ordering::Acquire) {
        parked += u64::from(c.poll());
        std::thread::sleep(Duration::from_micros(50));
    }
    parked
}

#[test]
fn a_panicking_operation_does_not_leave_workers_parked() {
    let c = Control::new();
    let (entered, leave) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let w = s.spawn(|| worker(&c, &entered, &leave));
        while !entered.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.safepoint(|| panic!("the operation fails"))
        }));
        assert!(r.is_err());
        // The worker went on: the next safepoint completes, and a new
        // worker can enter.
        let ((), _) = c.safepoint(|| ());
        drop(c.enter());
        leave.store(true, Ordering::Release);
        // (It may pass both safepoints in one park: the second can be
        // requested before it wakes from the first.)
        assert!(w.join().unwrap() >= 1);
    });
    assert_eq!(c.count(), 2);
}

#[test]
fn words_get_wait_bits_unless_the_safepoint_moves_objects() {
    let c = Control::new();
    let word = Arc::new(AtomicU32::new(0));
    let _r = c.register_waiting(&word, 2, 4);
    let ((), _) = c.safepoint(|| assert_eq!(word.load(Ordering::SeqCst), 4));
    let ((), _) = c.safepoint_with(|_| assert_eq!(word.load(Ordering::SeqCst), 2));
    assert_eq!(word.load(Ordering::SeqCst), 0);
    // A word that cannot wait is always asked to stop.
    let plain = Arc::new(AtomicU32::new(0));
    let _p = c.register(&plain, 2);
    let ((), _) = c.safepoint(|| assert_eq!(plain.load(Ordering::SeqCst), 2));
}

#[test]
fn a_safepoint_completes_when_a_running_worker_leaves_without_polling() {
    // The worker never polls: the requester waits for it to leave the
    // running set, and its leaving must wake the requester (it wakes
    // nobody when no safepoint is requested). Detached threads, so that a
    // requester left waiting fails the test rather than hanging it.
    let c = Arc::new(Control::new());
    let entered = Arc::new(AtomicBool::new(false));
    let leave = Arc::new(AtomicBool::new(false));
    let (done, finished) = std::sync::mpsc::channel();
    let worker = {
        let (c, entered, leave) = (c.clone(), entered.clone(), leave.clone());
        std::thread::spawn(move || {
            let running = c.enter();
            entered.store(true, Ordering::Release);
            while !leave.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            drop(running);
        })
    };
    while !entered.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    {
        let c = c.clone();
        std::thread::spawn(move || {
            let ((), _) = c.safepoint(|| ());
            let _ = done.send(());
        });
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        finished.try_recv().is_err(),
        "the safepoint did not wait for the worker"
    );
    leave.store(true, Ordering::Release);
    worker.join().unwrap();
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the worker's leaving did not wake the safepoint's requester");
    assert_eq!(c.count(), 1);
}

#[test]
fn a_worker_outside_does_not_hold_up_a_safepoint_and_returns_after_it() {
    let c = Control::new();
    let (inside, release, done) = (
        AtomicBool::new(false),
        AtomicBool::new(false),
        AtomicBool::new(false),
    );
    std::thread::scope(|s| {
        let w = s.spawn(|| {
            let _running = c.enter();
            // Blocked on something else (another launch's end, say).
            c.outside(|| {
                inside.store(true, Ordering::Release);
                while !release.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            });
            done.store(true, Ordering::Release);
        });
        while !inside.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        // The safepoint completes though the worker never polls; the
        // worker, released during the operation, comes back only after it.
        let ((), _) = c.safepoint(|| {
            release.store(true, Ordering::Release);
            std::thread::sleep(Duration::from_millis(20));
            assert!(
                !done.load(Ordering::Acquire),
                "came back during the operation"
            );
        });
        w.join().unwrap();
        assert!(done.load(Ordering::Acquire));
        // Counted as running again, then gone: a later safepoint completes.
        let ((), _) = c.safepoint(|| ());
    });
}
