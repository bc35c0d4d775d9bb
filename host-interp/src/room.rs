//! Waiting for room in the heap: what a worker does when an allocation
//! still fails after a collection while other workers run.
//!
//! A full heap during a launch is often full of what other workitems hold
//! for a while: eight workitems that each need 4.8 MB of an 8 MiB heap
//! cannot run two at a time, but each fits alone. Throwing
//! `OutOfMemory` for the one that came second would make the result
//! depend on timing, so the second waits instead ([`Control::wait_for_room`])
//! until the others make progress — a worker leaves the running set (a
//! chunk or a batch of replays ends) or ends a workitem
//! ([`Control::workitem_ended`]) — then collects and allocates inside that
//! collection's safepoint, where no other worker can take the room first:
//! the launch runs those workitems one after another. Only when every
//! running worker waits for room is one of them alone: it collects and
//! tries once more, and throws `OutOfMemory` if that fails (nothing else
//! can free anything), which lets the others go on.
//!
//! A waiting worker stays in the running set and parks at every
//! safepoint with its frames as roots, as at any poll, so collections
//! (its own and others') and interrupts go on around it.

use crate::Control;
use offload_heap::Roots;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What became of an allocation that waited for room
/// ([`crate::Collector::no_room`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AfterWait {
    /// Allocated at this word, inside the collection that made room (no
    /// other worker could take it first).
    Allocated(u32),
    /// Still no room, or the wait ended at a safepoint (which may have
    /// been an interrupt: look): try again.
    Retry,
    /// No room, for good: `OutOfMemory`.
    OutOfMemory,
}

/// How a wait for room ended ([`Control::wait_for_room`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Room {
    /// Another worker made progress: collect and try again.
    Progressed,
    /// The worker parked at a safepoint (a collection, or an interrupt the
    /// caller must look for): try again.
    Parked,
    /// Every running worker waits for room: this one collects and tries a
    /// last time.
    Alone,
}

impl Control {
    /// Wait, as a running worker whose allocation failed after a
    /// collection, until another worker makes progress, a safepoint parks
    /// this one, or every running worker waits (see the module docs);
    /// not before `not_before` returns [`Room::Progressed`] (so that the
    /// collections a waiter runs take a bounded share of the time).
    pub fn wait_for_room(&self, own: &mut dyn Roots, not_before: Instant) -> Room {
        let mut st = self.lock();
        let seen = st.progress;
        st.room_waiters += 1;
        self.room_waiters.store(st.room_waiters, Ordering::Relaxed);
        // Another waiter may now be one of all.
        self.cv.notify_all();
        let out = loop {
            if st.requested {
                break Room::Parked;
            }
            let now = Instant::now();
            if st.progress != seen && now >= not_before {
                break Room::Progressed;
            }
            if st.room_waiters >= st.running {
                break Room::Alone;
            }
            // Woken by progress, another waiter, or a safepoint; the
            // timeout only bounds a missed wake-up and `not_before`.
            let limit = if st.progress != seen {
                not_before.saturating_duration_since(now)
            } else {
                Duration::from_millis(50)
            };
            st = self
                .cv
                .wait_timeout(st, limit.max(Duration::from_micros(100)))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        st.room_waiters -= 1;
        self.room_waiters.store(st.room_waiters, Ordering::Relaxed);
        if out == Room::Parked {
            drop(st);
            self.park_with(Some(own));
        }
        out
    }

    /// A workitem ended (completed or threw): progress for workers waiting
    /// for room. One relaxed load when none waits.
    #[inline]
    pub fn workitem_ended(&self) {
        if self.room_waiters.load(Ordering::Relaxed) > 0 {
            self.wake_room_waiters();
        }
    }

    #[cold]
    fn wake_room_waiters(&self) {
        let mut st = self.lock();
        st.progress += 1;
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    struct NoRoots;
    impl Roots for NoRoots {
        fn visit(&mut self, _: &mut dyn FnMut(&mut u32)) {}
    }

    #[test]
    fn a_lone_worker_is_alone_at_once() {
        let c = Control::new();
        let _r = c.enter();
        assert_eq!(c.wait_for_room(&mut NoRoots, Instant::now()), Room::Alone);
    }

    #[test]
    fn a_waiter_waits_for_another_workers_progress() {
        let c = Control::new();
        let ended = AtomicBool::new(false);
        std::thread::scope(|s| {
            let _a = c.enter();
            let other = c.enter();
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                ended.store(true, Ordering::SeqCst);
                c.workitem_ended();
                drop(other);
            });
            let r = c.wait_for_room(&mut NoRoots, Instant::now());
            assert_eq!(r, Room::Progressed);
            assert!(ended.load(Ordering::SeqCst), "returned before the progress");
        });
    }

    #[test]
    fn when_every_worker_waits_one_is_alone() {
        let c = Control::new();
        std::thread::scope(|s| {
            let (a, b) = (c.enter(), c.enter());
            let h = s.spawn(|| {
                let r = c.wait_for_room(&mut NoRoots, Instant::now());
                drop(b);
                r
            });
            let mine = c.wait_for_room(&mut NoRoots, Instant::now());
            let theirs = h.join().unwrap();
            drop(a);
            // One found itself alone; the other then saw it go on (or was
            // alone after the first left).
            assert!(
                mine == Room::Alone || theirs == Room::Alone,
                "{mine:?} {theirs:?}"
            );
        });
    }

    #[test]
    fn a_safepoint_parks_a_waiter() {
        let c = Control::new();
        std::thread::scope(|s| {
            // This thread is a running worker that does not wait, so the
            // waiter is not alone.
            let _a = c.enter();
            let h = s.spawn(|| {
                let _w = c.enter();
                c.wait_for_room(&mut NoRoots, Instant::now())
            });
            while c.room_waiters.load(Ordering::Relaxed) == 0 {
                std::thread::yield_now();
            }
            let (ran, _) = c
                .safepoint_from_worker(&mut NoRoots, |_| true)
                .expect("no other safepoint");
            assert!(ran);
            assert_eq!(h.join().unwrap(), Room::Parked);
        });
    }
}
