//! loom models of the dispatch protocol. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p offload-gang --test loom --release`
//! (scripts/test-all does).
#![cfg(loom)]

use loom::cell::UnsafeCell;
use offload_gang::Gang;
use std::time::Duration;

/// Cells that slots write without synchronization of their own.
struct Cells([UnsafeCell<u32>; 2]);

// SAFETY: each slot writes only its own cell, and the caller reads them
// only between dispatches; loom's cells check exactly that.
unsafe impl Sync for Cells {}

impl Cells {
    fn cell(&self, slot: usize) -> &UnsafeCell<u32> {
        &self.0[slot]
    }
}

/// Each slot writes its own cell with plain (non-atomic) writes: loom
/// reports a data race unless `run`'s return happens after every slot's
/// write; two dispatches in a row check that a helper never runs a
/// generation twice or misses one.
#[test]
fn dispatches_run_each_slot_once_and_publish_its_writes() {
    loom::model(|| {
        let g = Gang::with_spin(2, |i| format!("h{i}"), Duration::ZERO).unwrap();
        let cells = Cells([UnsafeCell::new(0u32), UnsafeCell::new(0u32)]);
        for round in 1..=2u32 {
            g.run(&|slot| {
                // SAFETY: slot `slot` is the only writer of its cell during
                // a dispatch; loom checks the reads below.
                cells.cell(slot).with_mut(|p| unsafe { *p += 1 });
            })
            .unwrap();
            for c in &cells.0 {
                // SAFETY: no slot runs between dispatches.
                assert_eq!(c.with(|p| unsafe { *p }), round);
            }
        }
        drop(g);
    });
}

/// A panic in the helper's slot reaches the caller after the join.
#[test]
fn a_helper_panic_reaches_the_caller() {
    loom::model(|| {
        let g = Gang::with_spin(2, |i| format!("h{i}"), Duration::ZERO).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            g.run(&|slot| {
                if slot == 1 {
                    panic!("helper");
                }
            })
        }));
        assert!(r.is_err());
        drop(g);
    });
}

/// A draining dispatch: the caller may skip the helper's slot or wait for
/// it, never both; a skipped helper runs nothing, and the next dispatch
/// (a plain one) still reaches it.
#[test]
fn a_draining_dispatch_runs_each_slot_at_most_once() {
    loom::model(|| {
        let g = Gang::with_spin(2, |i| format!("h{i}"), Duration::ZERO).unwrap();
        let cells = Cells([UnsafeCell::new(0u32), UnsafeCell::new(0u32)]);
        g.run_draining(&|slot| {
            // SAFETY: as in the first model.
            cells.cell(slot).with_mut(|p| unsafe { *p += 1 });
        })
        .unwrap();
        // SAFETY: no slot runs between dispatches.
        let helper_ran = cells.cell(1).with(|p| unsafe { *p });
        assert!(helper_ran <= 1);
        g.run(&|slot| {
            // SAFETY: as above.
            cells.cell(slot).with_mut(|p| unsafe { *p += 1 });
        })
        .unwrap();
        // SAFETY: as above.
        assert_eq!(cells.cell(0).with(|p| unsafe { *p }), 2);
        // SAFETY: as above.
        assert_eq!(cells.cell(1).with(|p| unsafe { *p }), helper_ran + 1);
        drop(g);
    });
}

/// Three draining dispatches in a row, the caller skipping the helper in
/// any of them: a helper that saw a generation and was overtaken before it
/// claimed its slot must not claim it later — by then the caller may have
/// skipped a newer generation, and a late claim would run a newer
/// dispatch's slot (twice, or with its count taken off twice: the caller
/// then waits forever, which loom reports as a deadlock).
#[test]
fn an_overtaken_helper_never_claims_a_later_dispatch() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let g = Gang::with_spin(2, |i| format!("h{i}"), Duration::ZERO).unwrap();
        let cells = Cells([UnsafeCell::new(0u32), UnsafeCell::new(0u32)]);
        let mut helper_before = 0;
        for round in 1..=3u32 {
            g.run_draining(&|slot| {
                // SAFETY: as in the first model.
                cells.cell(slot).with_mut(|p| unsafe { *p += 1 });
            })
            .unwrap();
            // SAFETY: no slot runs between dispatches.
            assert_eq!(cells.cell(0).with(|p| unsafe { *p }), round);
            // SAFETY: as above.
            let helper = cells.cell(1).with(|p| unsafe { *p });
            assert!(
                helper <= helper_before + 1,
                "a slot ran twice in one dispatch"
            );
            helper_before = helper;
        }
        drop(g);
    });
}

/// Two dispatches beside the team's in a row (the helper idle): slot 0
/// always runs, the helper takes the other slot of each at most once, and
/// what it wrote is visible once `run_beside` returns (loom reports a
/// data race otherwise); then a team dispatch still reaches the helper.
/// Explored up to two preemptions (unbounded, it runs past ten minutes).
#[test]
fn a_dispatch_beside_runs_each_slot_at_most_once_and_joins_them() {
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let g = Gang::with_spin(2, |i| format!("h{i}"), Duration::ZERO).unwrap();
        let cells = Cells([UnsafeCell::new(0u32), UnsafeCell::new(0u32)]);
        let mut helper_ran = 0;
        for round in 1..=2u32 {
            g.run_beside(&|slot| {
                // SAFETY: as in the first model.
                cells.cell(slot).with_mut(|p| unsafe { *p += 1 });
            })
            .unwrap();
            // SAFETY: no slot runs between dispatches.
            assert_eq!(cells.cell(0).with(|p| unsafe { *p }), round);
            // SAFETY: as above.
            let now = cells.cell(1).with(|p| unsafe { *p });
            assert!(now <= helper_ran + 1);
            helper_ran = now;
        }
        g.run(&|slot| {
            // SAFETY: as above.
            cells.cell(slot).with_mut(|p| unsafe { *p += 1 });
        })
        .unwrap();
        // SAFETY: as above.
        assert_eq!(cells.cell(1).with(|p| unsafe { *p }), helper_ran + 1);
        drop(g);
    });
}

/// A dispatch beside one the team runs (on another thread): the helper
/// runs its team slot or not (draining), takes the side's slot or not,
/// and neither dispatcher returns before what the helper did for it.
/// Three threads and two dispatches: explored up to two preemptions
/// (unbounded, the model runs for tens of minutes).
#[test]
fn a_dispatch_beside_the_teams_shares_the_helper() {
    use loom::sync::Arc;
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(2);
    model.check(|| {
        let g = Arc::new(Gang::with_spin(2, |i| format!("h{i}"), Duration::ZERO).unwrap());
        let team = Arc::new(Cells([UnsafeCell::new(0u32), UnsafeCell::new(0u32)]));
        let t = {
            let (g, team) = (Arc::clone(&g), Arc::clone(&team));
            loom::thread::spawn(move || {
                let r = g.run_draining(&|slot| {
                    // SAFETY: as in the first model.
                    team.cell(slot).with_mut(|p| unsafe { *p += 1 });
                });
                if r.is_ok() {
                    // SAFETY: no slot of this dispatch runs after it returns.
                    assert_eq!(team.cell(0).with(|p| unsafe { *p }), 1);
                    // SAFETY: as above.
                    assert!(team.cell(1).with(|p| unsafe { *p }) <= 1);
                }
            })
        };
        let side = Cells([UnsafeCell::new(0u32), UnsafeCell::new(0u32)]);
        let r = g.run_beside(&|slot| {
            // SAFETY: each slot writes only its own cell.
            side.cell(slot).with_mut(|p| unsafe { *p += 1 });
        });
        assert!(r.is_ok());
        // SAFETY: no slot of the side runs after `run_beside` returns.
        assert_eq!(side.cell(0).with(|p| unsafe { *p }), 1);
        // SAFETY: as above.
        assert!(side.cell(1).with(|p| unsafe { *p }) <= 1);
        t.join().unwrap();
        drop(g);
    });
}
