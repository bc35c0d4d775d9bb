//! The launch team: every slot once per dispatch, panics raised after the
//! join, one dispatch at a time, helpers that park and wake.
#![cfg(not(loom))]

use offload_gang::{Busy, Gang};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

fn gang(workers: usize) -> Gang {
    Gang::new(workers, |i| format!("test-slot-{i}")).expect("threads start")
}

#[test]
fn every_slot_runs_once_per_dispatch() {
    for workers in 1..=5 {
        let g = gang(workers);
        assert_eq!(g.workers(), workers);
        let counts: Vec<AtomicUsize> = (0..workers).map(|_| AtomicUsize::new(0)).collect();
        for round in 1..=200 {
            g.run(&|slot| {
                counts[slot].fetch_add(1, Ordering::Relaxed);
            })
            .expect("no other dispatch");
            // Everything each slot did is visible once `run` returns.
            for (slot, c) in counts.iter().enumerate() {
                assert_eq!(c.load(Ordering::Relaxed), round, "slot {slot} of {workers}");
            }
        }
    }
}

#[test]
fn slot_zero_runs_on_the_caller_and_the_others_on_named_helpers() {
    let g = gang(3);
    let names = Mutex::new(vec![String::new(); 3]);
    let caller = std::thread::current().id();
    let on_caller = Mutex::new(vec![false; 3]);
    g.run(&|slot| {
        let t = std::thread::current();
        names.lock().unwrap()[slot] = t.name().unwrap_or("").to_string();
        on_caller.lock().unwrap()[slot] = t.id() == caller;
    })
    .unwrap();
    assert_eq!(*on_caller.lock().unwrap(), [true, false, false]);
    let names = names.into_inner().unwrap();
    assert_eq!(names[1], "test-slot-1");
    assert_eq!(names[2], "test-slot-2");
}

#[test]
fn helpers_that_parked_wake_for_the_next_dispatch() {
    // No spin: every helper parks as soon as it is idle.
    let g = Gang::with_spin(3, |i| format!("p{i}"), Duration::ZERO).unwrap();
    let hits = AtomicUsize::new(0);
    for _ in 0..50 {
        g.run(&|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        std::thread::sleep(Duration::from_micros(300));
    }
    assert_eq!(hits.load(Ordering::Relaxed), 150);
}

#[test]
fn a_panic_in_any_slot_is_raised_after_every_slot_returned() {
    for bad in 0..3 {
        let g = gang(3);
        let finished = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            g.run(&|slot| {
                if slot == bad {
                    panic!("slot {slot} failed");
                }
                std::thread::sleep(Duration::from_millis(20));
                finished.fetch_add(1, Ordering::Relaxed);
            })
        }));
        let payload = r.expect_err("the panic comes through");
        let msg = payload
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert_eq!(msg, &format!("slot {bad} failed"));
        assert_eq!(
            finished.load(Ordering::Relaxed),
            2,
            "the other slots finished first"
        );
        // The gang still works.
        let n = AtomicUsize::new(0);
        g.run(&|_| {
            n.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(n.load(Ordering::Relaxed), 3);
    }
}

#[test]
fn a_second_dispatch_while_one_is_in_flight_is_busy() {
    let g = Arc::new(gang(2));
    let inside = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    let t = {
        let (g, inside, release) = (Arc::clone(&g), Arc::clone(&inside), Arc::clone(&release));
        std::thread::spawn(move || {
            g.run(&|slot| {
                if slot == 0 {
                    inside.wait();
                    release.wait();
                }
            })
        })
    };
    inside.wait();
    assert_eq!(g.run(&|_| panic!("must not run")), Err(Busy));
    release.wait();
    assert_eq!(t.join().unwrap(), Ok(()));
    assert_eq!(g.run(&|_| {}), Ok(()));
}

#[test]
fn dropping_the_gang_stops_its_helpers() {
    let g = gang(4);
    let weak = {
        let marker = Arc::new(());
        let m = Arc::clone(&marker);
        g.run(&move |_| {
            let _ = &m;
        })
        .unwrap();
        Arc::downgrade(&marker)
    };
    drop(g); // joins the helpers; a hang here fails the test by timeout
    assert!(weak.upgrade().is_none());
}

#[test]
fn a_draining_dispatch_skips_helpers_that_have_not_started() {
    // Helpers park at once, so each dispatch must wake them; slot 0 is
    // done in no time. Every slot runs at most once, slot 0 always, and
    // the gang keeps working whichever way each race went.
    let g = Gang::with_spin(4, |i| format!("d{i}"), Duration::ZERO).unwrap();
    let runs: Vec<AtomicUsize> = (0..4).map(|_| AtomicUsize::new(0)).collect();
    for round in 1..=300 {
        let ran = Mutex::new(vec![0usize; 4]);
        g.run_draining(&|slot| {
            ran.lock().unwrap()[slot] += 1;
            runs[slot].fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        let ran = ran.into_inner().unwrap();
        assert_eq!(ran[0], 1, "round {round}");
        assert!(ran.iter().all(|&n| n <= 1), "round {round}: {ran:?}");
    }
    assert_eq!(runs[0].load(Ordering::Relaxed), 300);
}

#[test]
fn a_draining_dispatch_waits_for_helpers_that_started() {
    let g = gang(3);
    let started = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    for _ in 0..20 {
        g.run_draining(&|slot| {
            if slot == 0 {
                // Give the (spinning) helpers time to start.
                let t = std::time::Instant::now();
                while started.load(Ordering::Relaxed) < 2 && t.elapsed() < Duration::from_secs(5) {
                    std::hint::spin_loop();
                }
                return;
            }
            started.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(2));
            finished.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        // Whatever started finished before `run_draining` returned.
        assert_eq!(
            finished.load(Ordering::Relaxed),
            started.load(Ordering::Relaxed)
        );
        started.store(0, Ordering::Relaxed);
        finished.store(0, Ordering::Relaxed);
    }
}

#[test]
fn back_to_back_draining_dispatches_never_hang_nor_run_a_slot_twice() {
    // More helpers than cores, spinning: the scheduler preempts a helper
    // between reading a generation and claiming its slot, while its caller
    // skips it and goes on. A helper that then claimed the stale generation
    // ran a newer dispatch's slot and took a second count off its
    // `pending`, and the next dispatch waited forever (seen in a profile
    // run of saxpy). Run on a thread of its own so that a hang fails the
    // test instead of stalling the suite.
    const ROUNDS: usize = 400_000;
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let workers = 2 * std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(2);
        let g = gang(workers);
        let mut twice = 0;
        for round in 0..ROUNDS {
            let ran: Vec<AtomicUsize> = (0..workers).map(|_| AtomicUsize::new(0)).collect();
            g.run_draining(&|slot| {
                ran[slot].fetch_add(1, Ordering::Relaxed);
                if slot == 0 {
                    // Long enough, sometimes, for helpers to wake.
                    for _ in 0..round % 64 {
                        std::hint::spin_loop();
                    }
                }
            })
            .unwrap();
            twice += ran.iter().filter(|n| n.load(Ordering::Relaxed) > 1).count();
        }
        let _ = done.send(twice);
    });
    match finished.recv_timeout(Duration::from_secs(120)) {
        Ok(twice) => assert_eq!(twice, 0, "slots that ran twice in one dispatch"),
        Err(_) => panic!("{ROUNDS} draining dispatches did not finish in 120 s: a lost wake-up"),
    }
}

#[test]
fn a_dispatch_beside_the_teams_gets_a_helper_once_it_is_free() {
    // The team's dispatch holds slot 0 until the side's slot 1 has run:
    // only a helper done with the team's slot 1 can run it.
    let g = Arc::new(gang(2));
    let inside = Arc::new(Barrier::new(2));
    let side_ran_on = Arc::new(Mutex::new(None::<String>));
    let t = {
        let (g, inside, ran) = (
            Arc::clone(&g),
            Arc::clone(&inside),
            Arc::clone(&side_ran_on),
        );
        std::thread::spawn(move || {
            g.run_draining(&|slot| {
                if slot == 0 {
                    inside.wait();
                    let t = std::time::Instant::now();
                    while ran.lock().unwrap().is_none() && t.elapsed() < Duration::from_secs(10) {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            })
        })
    };
    inside.wait();
    // The team is busy: a second team dispatch is refused, one beside runs.
    assert_eq!(g.run_draining(&|_| panic!("must not run")), Err(Busy));
    let slots = Mutex::new(Vec::new());
    g.run_beside(&|slot| {
        slots.lock().unwrap().push(slot);
        if slot == 0 {
            // Slot 0 waits (as a long launch would) until a helper joined.
            let t = std::time::Instant::now();
            while side_ran_on.lock().unwrap().is_none() && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_micros(100));
            }
        } else {
            let name = std::thread::current().name().map(str::to_owned);
            *side_ran_on.lock().unwrap() = name;
        }
    })
    .unwrap();
    assert_eq!(t.join().unwrap(), Ok(()));
    let mut slots = slots.into_inner().unwrap();
    slots.sort_unstable();
    assert_eq!(slots, [0, 1]);
    assert_eq!(side_ran_on.lock().unwrap().as_deref(), Some("test-slot-1"));
    // The team takes dispatches again.
    assert_eq!(g.run(&|_| {}), Ok(()));
}

#[test]
fn one_dispatch_beside_at_a_time_and_none_without_helpers() {
    assert_eq!(gang(1).run_beside(&|_| panic!("must not run")), Err(Busy));
    let g = Arc::new(gang(3));
    let inside = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    let t = {
        let (g, inside, release) = (Arc::clone(&g), Arc::clone(&inside), Arc::clone(&release));
        std::thread::spawn(move || {
            g.run_beside(&|slot| {
                if slot == 0 {
                    inside.wait();
                    release.wait();
                }
            })
        })
    };
    inside.wait();
    assert_eq!(g.run_beside(&|_| panic!("must not run")), Err(Busy));
    release.wait();
    assert_eq!(t.join().unwrap(), Ok(()));
    // Slots 1 and 2 ran at most once each; a later one beside runs again.
    let runs: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
    for round in 1..=200 {
        g.run_beside(&|slot| {
            runs[slot].fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(runs[0].load(Ordering::Relaxed), round);
    }
    assert!(runs[1..].iter().all(|r| r.load(Ordering::Relaxed) <= 200));
}

#[test]
fn a_panic_in_a_helpers_slot_beside_reaches_its_dispatcher() {
    let g = gang(2);
    for _ in 0..20 {
        let helper_ran = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            g.run_beside(&|slot| {
                if slot == 0 {
                    // Wait for the (spinning) helper to take slot 1.
                    let t = std::time::Instant::now();
                    while helper_ran.load(Ordering::Relaxed) == 0
                        && t.elapsed() < Duration::from_secs(5)
                    {
                        std::hint::spin_loop();
                    }
                } else {
                    helper_ran.store(1, Ordering::Relaxed);
                    panic!("side slot");
                }
            })
        }));
        assert_eq!(r.is_err(), helper_ran.load(Ordering::Relaxed) == 1);
        // The gang still works.
        assert_eq!(g.run(&|_| {}), Ok(()));
    }
}
