//! A dispatch beside the team's: [`crate::Gang::run_beside`].
//!
//! While one thread's dispatch holds the team, a second launch used to
//! run on a thread pool of its own: on a machine with as many cores as
//! workers, two launches in flight then ran on twice as many threads as
//! there are cores, and each waited for the scheduler to give its threads
//! turns (two half-size saxpys in flight took 1.01–1.13x one full-size
//! launch). A dispatch beside runs its slot 0 on its own thread at once and
//! offers its other slots to the helpers: a helper done with its slot of
//! the team's dispatch (or idle) takes one, so the two launches share the
//! team's threads instead of doubling them. Only for draining jobs (each
//! slot claims from a common queue until it is empty): a slot no helper
//! took has nothing to do once slot 0 returns, and is not run.
//!
//! The protocol is a mutex's: a helper takes a slot and counts itself
//! running under the side's lock, only while the side is open; the
//! dispatcher closes it under that lock after its slot 0 and waits for the
//! running count to reach zero before it returns, so no helper calls the
//! job after that (model-checked under loom, `gang/tests/loom.rs`).

use crate::job::JobRef;
use crate::lock;
use crate::sync::{Condvar, Mutex};
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A dispatch beside the team's: its job and the slots helpers took.
pub(crate) struct Side {
    state: Mutex<State>,
    /// Signalled when the last running helper returns after the close.
    ended: Condvar,
    /// The first panic of a helper's slot.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

struct State {
    job: JobRef,
    /// The next slot to hand out (slot 0 is the dispatcher's).
    next: usize,
    /// Slots in all.
    slots: usize,
    /// Helpers running a slot now.
    running: usize,
    /// Set once the dispatcher's slot 0 returned: no slot starts after.
    closed: bool,
}

impl Side {
    /// A side dispatch of `job` over `slots` slots, open.
    pub(crate) fn new(job: JobRef, slots: usize) -> Side {
        Side {
            state: Mutex::new(State {
                job,
                next: 1,
                slots,
                running: 0,
                closed: false,
            }),
            ended: Condvar::new(),
            panic: Mutex::new(None),
        }
    }

    /// Run one slot nobody has taken, on this thread; nothing when none
    /// is left or the side is closed.
    pub(crate) fn help(&self) {
        let (job, slot) = {
            let mut st = lock(&self.state);
            if st.closed || st.next >= st.slots {
                return;
            }
            st.next += 1;
            st.running += 1;
            (st.job, st.next - 1)
        };
        // SAFETY: the dispatcher does not return before `running` is back
        // to zero ([`Side::close`]), and this call counted itself running
        // while the side was open.
        let ran = catch_unwind(AssertUnwindSafe(|| unsafe { job.call(slot) }));
        if let Err(p) = ran {
            lock(&self.panic).get_or_insert(p);
        }
        let mut st = lock(&self.state);
        st.running -= 1;
        if st.running == 0 && st.closed {
            self.ended.notify_all();
        }
    }

    /// Let no more slots start, wait for those running, and give the
    /// first panic of a helper's slot.
    pub(crate) fn close(&self) -> Option<Box<dyn Any + Send>> {
        let mut st = lock(&self.state);
        st.closed = true;
        while st.running > 0 {
            st = self.ended.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        drop(st);
        lock(&self.panic).take()
    }
}
